package vfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteBackOS: on the OS file system WriteBack starts writeback of a
// file being written (sync_file_range on Linux) and the file goes on
// unchanged; on a closed file it fails.
func TestWriteBackOS(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	f, err := OS.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	for i := 0; i < len(want); i += 1 << 18 {
		if _, err := f.Write(want[i : i+1<<18]); err != nil {
			t.Fatal(err)
		}
		if err := WriteBack(f); err != nil {
			t.Fatalf("WriteBack after %d bytes: %v", i+1<<18, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(name); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes (%v), want the %d written", len(got), err, len(want))
	}
	if err := WriteBack(f); err == nil {
		t.Fatal("WriteBack of a closed file succeeded")
	}
}

package snapshot_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"coord/storage/snapshot"
	"coord/storage/vfs"
)

// sourceOf writes b as the file name and returns a Source for it with the
// sample's size and checksum sum.
func sourceOf(t *testing.T, m *vfs.MemFS, name string, b []byte, sum uint32) *snapshot.Source {
	t.Helper()
	f, err := m.Create(name)
	must(t, err)
	_, err = f.Write(b)
	must(t, err)
	must(t, f.Close())
	return snapshot.NewSource(m, name, int64(len(sample().Data)), sum)
}

// readSource reads a Source's data to its end.
func readSource(s *snapshot.Source) ([]byte, error) {
	r, err := s.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// A Source streams the data of a good file, and refuses, before the end
// of its data, a file that is damaged anywhere, cut short, padded, or not
// the one the log names (another checksum).
func TestSourceReadsAndVerifies(t *testing.T) {
	m := vfs.NewMemFS()
	must(t, m.MkdirAll("/snap"))
	name, sum, err := snapshot.Write(m, "/snap", sample())
	must(t, err)
	good, err := vfs.ReadFile(m, "/snap/"+name)
	must(t, err)

	got, err := readSource(snapshot.NewSource(m, "/snap/"+name, int64(len(sample().Data)), sum))
	if err != nil || !bytes.Equal(got, sample().Data) {
		t.Fatalf("reading a good file: %q, %v", got, err)
	}
	for i := range len(good) * 8 {
		bad := bytes.Clone(good)
		bad[i/8] ^= 1 << (i % 8)
		if _, err := readSource(sourceOf(t, m, "/bad", bad, sum)); err == nil {
			t.Fatalf("bit %d flipped: read without an error", i)
		}
	}
	for _, bad := range [][]byte{good[:len(good)-1], append(bytes.Clone(good), 0)} {
		if _, err := readSource(sourceOf(t, m, "/bad", bad, sum)); !errors.Is(err, snapshot.ErrCorrupt) {
			t.Fatalf("a file of %d bytes instead of %d: %v, want ErrCorrupt", len(bad), len(good), err)
		}
	}
	_, err = readSource(sourceOf(t, m, "/other", good, sum+1))
	if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "the log says") {
		t.Fatalf("a file with another checksum than the log's: %v, want ErrCorrupt naming the log", err)
	}
	// Version 1 files are read too.
	v1 := versionOne()
	v1sum := uint32(v1[len(v1)-4]) | uint32(v1[len(v1)-3])<<8 | uint32(v1[len(v1)-2])<<16 | uint32(v1[len(v1)-1])<<24
	if got, err := readSource(sourceOf(t, m, "/v1", v1, v1sum)); err != nil || !bytes.Equal(got, sample().Data) {
		t.Fatalf("reading a version 1 file: %q, %v", got, err)
	}
}

// The damage is reported with the last bytes of the data, so that a
// reader that stops at the size it was told (io.ReadFull) still sees it.
func TestSourceReportsDamageWithTheLastBytes(t *testing.T) {
	m := vfs.NewMemFS()
	must(t, m.MkdirAll("/snap"))
	name, sum, err := snapshot.Write(m, "/snap", sample())
	must(t, err)
	r, err := snapshot.NewSource(m, "/snap/"+name, int64(len(sample().Data)), sum+1).Open()
	must(t, err)
	defer r.Close()
	buf := make([]byte, len(sample().Data))
	if _, err := io.ReadFull(r, buf); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("io.ReadFull of exactly the data of a file the log does not name: %v, want ErrCorrupt", err)
	}
}

package snapshot_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"coord/raft"
	"coord/storage/snapshot"
	"coord/storage/vfs"
)

// Stat learns a snapshot file's metadata and data length from its header
// and size alone, for files of both versions, on every file system; it
// refuses a header, metadata, name or size that is wrong, and leaves
// damage inside the data to the reading (Source).
func TestStat(t *testing.T) {
	want := sample()
	for _, fsys := range []vfs.FS{vfs.NewMemFS(), vfs.NewFaultFS(vfs.NewMemFS(), 1, nil), vfs.OS} {
		dir := t.TempDir()
		must(t, fsys.MkdirAll(dir))
		name, _, err := snapshot.Write(fsys, dir, want)
		must(t, err)
		path := filepath.Join(dir, name)
		meta, size, err := snapshot.Stat(fsys, path)
		if err != nil || !equal(want, raftSnapshot(meta, want.Data)) || size != int64(len(want.Data)) {
			t.Fatalf("%T: Stat = %+v, %d, %v; want %+v, %d", fsys, meta, size, err, want.Metadata, len(want.Data))
		}
	}
	dir := t.TempDir()
	m := vfs.NewMemFS()
	must(t, m.MkdirAll(dir))
	write := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		f, err := m.Create(path)
		must(t, err)
		_, err = f.Write(b)
		must(t, err)
		must(t, f.Close())
		return path
	}
	v1 := write(snapshot.FileName(42, 7), versionOne())
	if meta, size, err := snapshot.Stat(m, v1); err != nil || meta.Index != 42 || size != int64(len(want.Data)) {
		t.Fatalf("version 1: Stat = %+v, %d, %v", meta, size, err)
	}
	good, _, err := snapshot.Write(m, dir, want)
	must(t, err)
	data, err := vfs.ReadFile(m, filepath.Join(dir, good))
	must(t, err)
	bad := []struct {
		name string
		file []byte
		text string
	}{
		{snapshot.FileName(42, 7), data[:10], "truncated"},
		{snapshot.FileName(42, 7), append([]byte("notaSNAP"), data[8:]...), "bad magic"},
		{snapshot.FileName(42, 7), versionOne()[:len(versionOne())-1], "truncated or padded"},
		{snapshot.FileName(43, 7), data, "file holds index 42"},
		{snapshot.FileName(42, 7), data[:30], "truncated"},
	}
	for _, b := range bad {
		path := write(b.name, b.file)
		if _, _, err := snapshot.Stat(m, path); !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), b.text) {
			t.Errorf("Stat of a file that is %s: %v, want ErrCorrupt", b.text, err)
		}
		must(t, m.Remove(path))
	}
	if _, _, err := snapshot.Stat(m, filepath.Join(dir, "missing.snap")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stat of a missing file: %v, want ErrNotExist", err)
	}
}

func raftSnapshot(meta raft.SnapshotMetadata, data []byte) raft.Snapshot {
	return raft.Snapshot{Metadata: meta, Data: data}
}

// Read and Stat size a file's data alike (one rule, header.dataBytes): for
// a file of either version cut to every length, or padded, a file Read
// accepts gets from Stat the length of the data Read returned, and a file
// Stat refuses Read refuses too. (Stat may accept a file Read refuses:
// damage after the header and metadata shows when the data is read.)
func TestReadAndStatSizeTheDataAlike(t *testing.T) {
	m := vfs.NewMemFS()
	must(t, m.MkdirAll("/snap"))
	name, _, err := snapshot.Write(m, "/snap", sample())
	must(t, err)
	v2, err := vfs.ReadFile(m, filepath.Join("/snap", name))
	must(t, err)
	for version, good := range map[int][]byte{1: versionOne(), 2: v2} {
		var files [][]byte
		for n := range len(good) + 1 {
			files = append(files, good[:n])
		}
		files = append(files, append(slices.Clone(good), 0), append(slices.Clone(good), make([]byte, 12)...))
		path := filepath.Join("/snap", name)
		for _, file := range files {
			f, err := m.Create(path)
			must(t, err)
			_, err = f.Write(file)
			must(t, err)
			must(t, f.Close())
			snap, _, readErr := snapshot.Read(m, path)
			_, size, statErr := snapshot.Stat(m, path)
			switch {
			case readErr == nil && (statErr != nil || size != int64(len(snap.Data))):
				t.Errorf("version %d, %d of %d bytes: Read gives %d bytes of data, Stat %d, %v", version, len(file), len(good), len(snap.Data), size, statErr)
			case statErr != nil && readErr == nil:
				t.Errorf("version %d, %d of %d bytes: Stat refuses (%v), Read accepts", version, len(file), len(good), statErr)
			}
		}
	}
}

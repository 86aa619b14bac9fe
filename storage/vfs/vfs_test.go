package vfs_test

import (
	"bytes"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"testing"

	"coord/storage/vfs"
)

// implementations returns every FS in the package, each with a root
// directory to work under.
func implementations(t *testing.T) map[string]func(t *testing.T) (vfs.FS, string) {
	return map[string]func(t *testing.T) (vfs.FS, string){
		"OS":      func(t *testing.T) (vfs.FS, string) { return vfs.OS, t.TempDir() },
		"MemFS":   func(t *testing.T) (vfs.FS, string) { return vfs.NewMemFS(), "/root" },
		"FaultFS": func(t *testing.T) (vfs.FS, string) { return vfs.NewFaultFS(vfs.NewMemFS(), 1, nil), "/root" },
	}
}

// TestFS checks the FS contract on every implementation.
func TestFS(t *testing.T) {
	for name, open := range implementations(t) {
		t.Run(name, func(t *testing.T) {
			fsys, root := open(t)
			testFS(t, fsys, root)
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, fsys vfs.FS, name, data string) {
	t.Helper()
	f, err := fsys.Create(name)
	must(t, err)
	_, err = f.Write([]byte(data))
	must(t, err)
	must(t, f.Sync())
	must(t, f.Close())
}

func readFile(t *testing.T, fsys vfs.FS, name string) string {
	t.Helper()
	data, err := vfs.ReadFile(fsys, name)
	must(t, err)
	return string(data)
}

func testFS(t *testing.T, fsys vfs.FS, root string) {
	dir := filepath.Join(root, "a", "b")
	must(t, vfs.MkdirAllDurable(fsys, dir))
	must(t, fsys.MkdirAll(dir)) // exists already: fine
	if ok, err := vfs.Exists(fsys, dir); err != nil || !ok {
		t.Fatalf("Exists(%s) = %v, %v after MkdirAll", dir, ok, err)
	}

	// Create, write, read back; Create again truncates.
	f1 := filepath.Join(dir, "f1")
	writeFile(t, fsys, f1, "hello")
	if got := readFile(t, fsys, f1); got != "hello" {
		t.Fatalf("read %q, want hello", got)
	}
	writeFile(t, fsys, f1, "hi")
	if got := readFile(t, fsys, f1); got != "hi" {
		t.Fatalf("after re-Create read %q, want hi", got)
	}

	// OpenAppend appends, also after Truncate.
	f, err := fsys.OpenAppend(f1)
	must(t, err)
	_, err = f.Write([]byte(" there"))
	must(t, err)
	must(t, f.Truncate(3))
	_, err = f.Write([]byte("!"))
	must(t, err)
	must(t, f.Sync())
	must(t, f.Close())
	if got := readFile(t, fsys, f1); got != "hi !" {
		t.Fatalf("after append and truncate read %q, want %q", got, "hi !")
	}

	// A read-only file refuses writes.
	r, err := fsys.Open(f1)
	must(t, err)
	if _, err := r.Write([]byte("x")); err == nil {
		t.Fatal("Write on a file opened with Open succeeded")
	}
	must(t, r.Close())

	// Rename replaces the target; List is sorted.
	f2 := filepath.Join(dir, "f2")
	writeFile(t, fsys, f2, "two")
	writeFile(t, fsys, filepath.Join(dir, "f0"), "zero")
	must(t, fsys.Rename(f1, f2))
	must(t, fsys.SyncDir(dir))
	if got := readFile(t, fsys, f2); got != "hi !" {
		t.Fatalf("after rename read %q", got)
	}
	names, err := fsys.List(dir)
	must(t, err)
	if !slices.Equal(names, []string{"f0", "f2"}) {
		t.Fatalf("List = %q, want [f0 f2]", names)
	}

	// Missing names wrap fs.ErrNotExist.
	missing := filepath.Join(dir, "missing")
	for what, err := range map[string]error{
		"Open":       func() error { _, err := fsys.Open(missing); return err }(),
		"OpenAppend": func() error { _, err := fsys.OpenAppend(missing); return err }(),
		"Remove":     fsys.Remove(missing),
		"Rename":     fsys.Rename(missing, f2),
		"List":       func() error { _, err := fsys.List(missing); return err }(),
		"Create":     func() error { _, err := fsys.Create(filepath.Join(missing, "x")); return err }(),
	} {
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s of a missing name: %v, want fs.ErrNotExist", what, err)
		}
	}
	if ok, err := vfs.Exists(fsys, missing); err != nil || ok {
		t.Fatalf("Exists(missing) = %v, %v", ok, err)
	}

	// Remove files, then the empty directory.
	if err := fsys.Remove(dir); err == nil {
		t.Fatal("Remove of a non-empty directory succeeded")
	}
	must(t, fsys.Remove(f2))
	must(t, fsys.Remove(filepath.Join(dir, "f0")))
	must(t, fsys.Remove(dir))
	must(t, fsys.SyncDir(filepath.Dir(dir)))
	if ok, _ := vfs.Exists(fsys, dir); ok {
		t.Fatal("directory still exists after Remove")
	}
}

func TestReadFileOfDirectoryFails(t *testing.T) {
	m := vfs.NewMemFS()
	must(t, m.MkdirAll("/d"))
	if _, err := vfs.ReadFile(m, "/d"); err == nil {
		t.Fatal("ReadFile of a directory succeeded")
	}
}

func TestClosedFile(t *testing.T) {
	m := vfs.NewMemFS()
	f, err := m.Create("/f")
	must(t, err)
	must(t, f.Close())
	if _, err := f.Write([]byte("x")); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("Write after Close: %v, want fs.ErrClosed", err)
	}
	if err := f.Close(); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("second Close: %v, want fs.ErrClosed", err)
	}
}

func TestBytesHelper(t *testing.T) {
	// ReadFile returns exactly the bytes written, binary included.
	m := vfs.NewMemFS()
	data := []byte{0, 1, 2, 255, 0}
	writeFile(t, m, "/bin", string(data))
	got, err := vfs.ReadFile(m, "/bin")
	must(t, err)
	if !bytes.Equal(got, data) {
		t.Fatalf("ReadFile = %v, want %v", got, data)
	}
}

package vfs_test

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand/v2"
	"testing"

	"coord/storage/vfs"
)

func TestMemFSCrashDropsUnsyncedData(t *testing.T) {
	m := vfs.NewMemFS()
	writeFile(t, m, "/f", "synced") // synced data; the name is not durable yet
	must(t, m.SyncDir("/"))
	f, err := m.OpenAppend("/f")
	must(t, err)
	_, err = f.Write([]byte("+unsynced"))
	must(t, err)
	if got := readFile(t, m, "/f"); got != "synced+unsynced" {
		t.Fatalf("before the crash read %q", got)
	}
	m.Crash()
	if got := readFile(t, m, "/f"); got != "synced" {
		t.Fatalf("after the crash read %q, want synced", got)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, vfs.ErrCrashed) {
		t.Fatalf("Write on a handle from before the crash: %v, want ErrCrashed", err)
	}
}

func TestMemFSCrashDropsUnsyncedNames(t *testing.T) {
	m := vfs.NewMemFS()
	must(t, m.MkdirAll("/d"))
	must(t, m.SyncDir("/"))
	writeFile(t, m, "/d/old", "old") // data synced, name not
	must(t, m.SyncDir("/d"))
	writeFile(t, m, "/d/new", "new") // never made durable by SyncDir
	must(t, m.MkdirAll("/e"))        // "/" not synced after this
	must(t, m.Rename("/d/old", "/d/renamed"))
	m.Crash()

	names, err := m.List("/d")
	must(t, err)
	if len(names) != 1 || names[0] != "old" {
		t.Fatalf("after the crash /d holds %q, want [old]: the create and the rename were not synced", names)
	}
	if ok, _ := vfs.Exists(m, "/e"); ok {
		t.Fatal("/e survived although / was not synced after MkdirAll")
	}

	// The same steps with the directory synced survive.
	must(t, m.Rename("/d/old", "/d/renamed"))
	must(t, m.Remove("/d/renamed"))
	must(t, m.SyncDir("/d"))
	m.Crash()
	names, err = m.List("/d")
	must(t, err)
	if len(names) != 0 {
		t.Fatalf("after a synced remove /d holds %q", names)
	}
}

func TestMemFSRemoveWithoutSyncDirComesBack(t *testing.T) {
	m := vfs.NewMemFS()
	writeFile(t, m, "/f", "data")
	must(t, m.SyncDir("/"))
	must(t, m.Remove("/f"))
	m.Crash()
	if got := readFile(t, m, "/f"); got != "data" {
		t.Fatalf("after crash read %q, want the removed file back", got)
	}
}

func TestMemFSCrashPoint(t *testing.T) {
	m := vfs.NewMemFS()
	f, err := m.Create("/f") // op 1
	must(t, err)
	must(t, m.SyncDir("/")) // op 2
	if got := m.Ops(); got != 2 {
		t.Fatalf("Ops = %d, want 2", got)
	}
	m.SetCrashPoint(2)
	_, err = f.Write([]byte("a")) // op 3: fine
	must(t, err)
	if _, err := f.Write([]byte("b")); !errors.Is(err, vfs.ErrCrashed) { // op 4: the crash point
		t.Fatalf("Write at the crash point: %v, want ErrCrashed", err)
	}
	if !m.Crashed() {
		t.Fatal("Crashed() = false after the crash point")
	}
	if _, err := m.List("/"); !errors.Is(err, vfs.ErrCrashed) {
		t.Fatalf("List after the crash point: %v, want ErrCrashed", err)
	}
	if err := f.Sync(); !errors.Is(err, vfs.ErrCrashed) {
		t.Fatalf("Sync after the crash point: %v, want ErrCrashed", err)
	}
	m.Crash()
	if m.Crashed() {
		t.Fatal("Crashed() = true after Crash")
	}
	if got := readFile(t, m, "/f"); got != "" {
		t.Fatalf("after crash read %q, want nothing: no Sync reached the file", got)
	}
}

func TestMemFSCrashingSyncIsDurable(t *testing.T) {
	// The operation at the crash point takes effect: a Sync there made the
	// data durable although the caller saw an error.
	m := vfs.NewMemFS()
	f, err := m.Create("/f")
	must(t, err)
	must(t, m.SyncDir("/"))
	_, err = f.Write([]byte("data"))
	must(t, err)
	m.SetCrashPoint(1)
	if err := f.Sync(); !errors.Is(err, vfs.ErrCrashed) {
		t.Fatalf("Sync at the crash point: %v", err)
	}
	m.Crash()
	if got := readFile(t, m, "/f"); got != "data" {
		t.Fatalf("read %q, want data", got)
	}
}

// TestMemFSCrashTorn checks, over many seeds, that a torn crash keeps all
// synced data and some prefix of the unsynced writes (possibly ending in
// zeros), and that each kind of outcome occurs.
func TestMemFSCrashTorn(t *testing.T) {
	const synced, unsynced = "synced|", "abcdefgh"
	kinds := map[string]int{}
	for seed := range uint64(300) {
		m := vfs.NewMemFS()
		writeFile(t, m, "/f", synced)
		must(t, m.SyncDir("/"))
		f, err := m.OpenAppend("/f")
		must(t, err)
		_, err = f.Write([]byte(unsynced))
		must(t, err)
		m.CrashTorn(rand.New(rand.NewPCG(seed, 1)))
		got, err := vfs.ReadFile(m, "/f")
		must(t, err)
		if !bytes.HasPrefix(got, []byte(synced)) {
			t.Fatalf("seed %d: synced data lost: %q", seed, got)
		}
		tail := got[len(synced):]
		if len(tail) > len(unsynced) {
			t.Fatalf("seed %d: tail %q longer than what was written", seed, tail)
		}
		trimmed := bytes.TrimRight(tail, "\x00")
		if !bytes.HasPrefix([]byte(unsynced), trimmed) {
			t.Fatalf("seed %d: tail %q is not a prefix of %q followed by zeros", seed, tail, unsynced)
		}
		switch {
		case len(tail) == 0:
			kinds["none"]++
		case len(trimmed) < len(tail):
			kinds["zeroed"]++
		case len(tail) == len(unsynced):
			kinds["all"]++
		default:
			kinds["prefix"]++
		}
	}
	for _, k := range []string{"none", "zeroed", "all", "prefix"} {
		if kinds[k] == 0 {
			t.Errorf("no seed produced outcome %q: %v", k, kinds)
		}
	}
}

func TestMemFSCrashTornIsDeterministic(t *testing.T) {
	run := func() []string {
		m := vfs.NewMemFS()
		for _, name := range []string{"/a", "/b", "/c"} {
			f, err := m.Create(name)
			must(t, err)
			_, err = f.Write([]byte("0123456789"))
			must(t, err)
		}
		m.CrashTorn(rand.New(rand.NewPCG(42, 7)))
		names, err := m.List("/")
		must(t, err)
		var out []string
		for _, n := range names {
			out = append(out, n+"="+readFile(t, m, "/"+n))
		}
		return out
	}
	a, b := run(), run()
	if len(a) != len(b) {
		t.Fatalf("same seed, different outcomes: %q vs %q", a, b)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different outcomes: %q vs %q", a, b)
		}
	}
}

func TestMemFSErrors(t *testing.T) {
	m := vfs.NewMemFS()
	writeFile(t, m, "/file", "x")
	if err := m.MkdirAll("/file/sub"); err == nil {
		t.Fatal("MkdirAll through a file succeeded")
	}
	if _, err := m.Create("/file/sub"); err == nil {
		t.Fatal("Create under a file succeeded")
	}
	must(t, m.MkdirAll("/dir"))
	if _, err := m.Create("/dir"); err == nil {
		t.Fatal("Create over a directory succeeded")
	}
	if err := m.Rename("/file", "/dir"); err == nil {
		t.Fatal("Rename over a directory succeeded")
	}
	if _, err := m.Open("/dir"); err == nil {
		t.Fatal("Open of a directory succeeded")
	}
	if err := m.SyncDir("/file"); err == nil {
		t.Fatal("SyncDir of a file succeeded")
	}
	if _, err := m.List("/file"); err == nil {
		t.Fatal("List of a file succeeded")
	}
	if err := m.Remove("/"); !errors.Is(err, fs.ErrInvalid) {
		t.Fatalf("Remove of the root: %v, want fs.ErrInvalid", err)
	}
}

package vfs_test

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"coord/storage/vfs"
)

// TestWriteAtFile checks the WriteAtFile contract on every implementation:
// Allocate extends with zeros and never shrinks, writes land at their
// offsets inside the allocated space without changing the size, Truncate
// cuts, and CreateWriteAt truncates an existing file.
func TestWriteAtFile(t *testing.T) {
	for name, open := range implementations(t) {
		t.Run(name, func(t *testing.T) {
			fsys, root := open(t)
			must(t, fsys.MkdirAll(root))
			path := filepath.Join(root, "seg")
			f, err := fsys.CreateWriteAt(path)
			must(t, err)
			must(t, f.Allocate(4096))
			must(t, f.Allocate(100)) // never shrinks
			_, err = f.WriteAt([]byte("head"), 0)
			must(t, err)
			_, err = f.WriteAt([]byte("tail"), 1000)
			must(t, err)
			must(t, f.SyncData())
			want := make([]byte, 4096)
			copy(want, "head")
			copy(want[1000:], "tail")
			if got := readFile(t, fsys, path); got != string(want) {
				t.Fatalf("after Allocate and two WriteAt: %d bytes, want 4096 with the writes in place", len(got))
			}
			r, err := fsys.Open(path)
			must(t, err)
			if size, err := vfs.FileSize(r); err != nil || size != 4096 {
				t.Fatalf("FileSize after Allocate(4096): %d, %v; want 4096, as ReadFile reads", size, err)
			}
			must(t, r.Close())
			_, err = f.WriteAt([]byte("past"), 4096) // past the allocation: grows
			must(t, err)
			must(t, f.Truncate(1004))
			must(t, f.Sync())
			must(t, f.Close())
			if got := readFile(t, fsys, path); got != string(want[:1004]) {
				t.Fatalf("after Truncate(1004): %d bytes %q..., want the first 1004", len(got), got[:min(len(got), 8)])
			}
			f, err = fsys.OpenWriteAt(path)
			must(t, err)
			_, err = f.WriteAt([]byte("HE"), 0)
			must(t, err)
			must(t, f.Close())
			if got := readFile(t, fsys, path); len(got) != 1004 || got[:4] != "HEad" {
				t.Fatalf("after OpenWriteAt and a write at 0: %d bytes %q...", len(got), got[:4])
			}
			f, err = fsys.CreateWriteAt(path)
			must(t, err)
			must(t, f.Close())
			if got := readFile(t, fsys, path); got != "" {
				t.Fatalf("CreateWriteAt of an existing file left %d bytes", len(got))
			}
			if _, err := fsys.OpenWriteAt(filepath.Join(root, "missing")); err == nil {
				t.Fatal("OpenWriteAt of a missing file succeeded")
			}
		})
	}
}

// A MemFS crash keeps an allocation only once synced, and writes into
// allocated space only up to their last sync; a torn crash keeps a prefix
// of them over the allocated zeros, the file's size unchanged.
func TestMemFSCrashWithAllocatedSpace(t *testing.T) {
	m := vfs.NewMemFS()
	f, err := m.CreateWriteAt("/seg")
	must(t, err)
	must(t, m.SyncDir("/"))
	must(t, f.Allocate(64))
	_, err = f.WriteAt([]byte("synced"), 0)
	must(t, err)
	must(t, f.Sync())
	_, err = f.WriteAt([]byte("+unsynced"), 6)
	must(t, err)
	m.Crash()
	want := append([]byte("synced"), make([]byte, 58)...)
	if got := readFile(t, m, "/seg"); got != string(want) {
		t.Fatalf("after a crash read %q, want the synced bytes and the allocated zeros", got)
	}

	full := append([]byte("synced+unsynced"), make([]byte, 49)...)
	for seed := range uint64(50) {
		f, err := m.OpenWriteAt("/seg")
		must(t, err)
		_, err = f.WriteAt([]byte("+unsynced"), 6)
		must(t, err)
		m.CrashTorn(rand.New(rand.NewPCG(seed, 1)))
		got := []byte(readFile(t, m, "/seg"))
		if len(got) != 64 || !bytes.HasPrefix(got, []byte("synced")) {
			t.Fatalf("seed %d: torn crash left %q, want 64 bytes starting with the synced ones", seed, got)
		}
		// What is not the written byte is zero: a prefix of the write,
		// maybe with its end zeroed.
		for i := range got {
			if got[i] != full[i] && got[i] != 0 {
				t.Fatalf("seed %d: byte %d is %q, neither written nor zero", seed, i, got[i])
			}
		}
		// Back to the synced state for the next seed.
		f, err = m.OpenWriteAt("/seg")
		must(t, err)
		_, err = f.WriteAt(make([]byte, 9), 6)
		must(t, err)
		must(t, f.Sync())
		must(t, f.Close())
	}
}

// A full disk fails an allocation with ENOSPC and leaves the file as it was.
func TestFaultFSAllocateNoSpace(t *testing.T) {
	m := vfs.NewMemFS()
	fsys := vfs.NewFaultFS(m, 1, vfs.NoSpace())
	f, err := fsys.CreateWriteAt("/seg")
	must(t, err)
	if err := f.Allocate(1 << 20); !vfs.IsNoSpace(err) || !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("Allocate on a full disk: %v, want ENOSPC", err)
	}
	if got := readFile(t, m, "/seg"); got != "" {
		t.Fatalf("a failed allocation left %d bytes", len(got))
	}
	if _, err := f.WriteAt([]byte("x"), 0); !vfs.IsNoSpace(err) {
		t.Fatalf("WriteAt on a full disk: %v, want ENOSPC", err)
	}
	fsys.SetInjector(nil)
	must(t, f.Allocate(10))
	must(t, f.SyncData())
	if got := readFile(t, m, "/seg"); len(got) != 10 {
		t.Fatalf("after space returned, %d bytes, want 10", len(got))
	}
}

// A MemFS refuses a negative size and a closed file in Allocate and
// Truncate alike (their shared preamble, resize), and leaves the file as
// it was.
func TestMemFSResizeRefusals(t *testing.T) {
	fsys := vfs.NewMemFS()
	f, err := fsys.CreateWriteAt("/seg")
	must(t, err)
	_, err = f.WriteAt([]byte("kept"), 0)
	must(t, err)
	resizes := map[string]func(int64) error{"Allocate": f.Allocate, "Truncate": f.Truncate}
	for name, resize := range resizes {
		if err := resize(-1); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("%s(-1): %v, want fs.ErrInvalid", name, err)
		}
	}
	must(t, f.Sync())
	must(t, f.Close())
	for name, resize := range resizes {
		if err := resize(1); !errors.Is(err, fs.ErrClosed) {
			t.Errorf("%s on a closed file: %v, want fs.ErrClosed", name, err)
		}
	}
	if got := readFile(t, fsys, "/seg"); got != "kept" {
		t.Fatalf("after refused resizes: %q, want %q", got, "kept")
	}
}

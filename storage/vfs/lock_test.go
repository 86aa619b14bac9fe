package vfs_test

import (
	"errors"
	"path/filepath"
	"testing"

	"coord/storage/vfs"
)

// TestLock checks on every implementation that a lock excludes a second
// holder until it is released.
func TestLock(t *testing.T) {
	for name, open := range implementations(t) {
		t.Run(name, func(t *testing.T) {
			fsys, root := open(t)
			if err := fsys.MkdirAll(root); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(root, "LOCK")
			first, err := fsys.Lock(path)
			if err != nil {
				t.Fatalf("first Lock: %v", err)
			}
			if _, err := fsys.Lock(path); !errors.Is(err, vfs.ErrLocked) {
				t.Fatalf("second Lock while held: %v, want ErrLocked", err)
			}
			if err := first.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			again, err := fsys.Lock(path)
			if err != nil {
				t.Fatalf("Lock after release: %v", err)
			}
			again.Close()
		})
	}
}

// TestMemFSCrashReleasesLocks: a crash, or ReleaseLocks, is the death of
// the processes that used the file system, and the kernel would have
// released their locks. A dead holder's handle must not release the lock of
// the next holder.
func TestMemFSCrashReleasesLocks(t *testing.T) {
	for name, release := range map[string]func(*vfs.MemFS){
		"Crash":        (*vfs.MemFS).Crash,
		"ReleaseLocks": (*vfs.MemFS).ReleaseLocks,
	} {
		t.Run(name, func(t *testing.T) {
			m := vfs.NewMemFS()
			old, err := m.Lock("/d/LOCK")
			if err != nil {
				t.Fatal(err)
			}
			release(m)
			l, err := m.Lock("/d/LOCK")
			if err != nil {
				t.Fatalf("Lock after %s: %v", name, err)
			}
			old.Close() // the dead holder's handle must not release the new lock
			if _, err := m.Lock("/d/LOCK"); !errors.Is(err, vfs.ErrLocked) {
				t.Fatalf("Lock after a stale Close: %v, want ErrLocked", err)
			}
			l.Close()
		})
	}
}

package raftstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/vfs"
)

// TestSaveRefusesADirectoryRemovedUnderIt: a data directory removed while
// the Disk is open (and, in the second case, made again) leaves the open
// log segment writable but unlinked. With Options.CheckDirEvery, the next
// Save that checks fails with ErrLost instead of acknowledging entries no
// restart would find, and so does every later Save and Repair.
func TestSaveRefusesADirectoryRemovedUnderIt(t *testing.T) {
	for _, remake := range []bool{false, true} {
		name := map[bool]string{false: "removed", true: "removed and made again"}[remake]
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "node")
			d, err := raftstore.Open(vfs.OS, dir, raftstore.Options{CheckDirEvery: time.Nanosecond})
			must(t, err)
			defer d.Close()
			must(t, d.Save(raft.HardState{Term: 1, Vote: 1}, ents(1, 3, 1), true))

			must(t, os.RemoveAll(dir))
			if remake {
				// Another process's directory at the same path, LOCK
				// file included.
				must(t, os.MkdirAll(dir, 0o755))
				must(t, os.WriteFile(filepath.Join(dir, "LOCK"), nil, 0o644))
			}
			err = d.Save(raft.HardState{Term: 1, Vote: 1, Commit: 3}, ents(4, 1, 1), true)
			if !errors.Is(err, raftstore.ErrLost) {
				t.Fatalf("Save after the directory was %s: %v, want ErrLost", name, err)
			}
			if last, _ := d.LastIndex(); last != 3 {
				t.Errorf("LastIndex after the refused Save = %d, want 3", last)
			}
			if err := d.Repair(); !errors.Is(err, raftstore.ErrLost) {
				t.Errorf("Repair: %v, want ErrLost", err)
			}
			if err := d.Save(raft.HardState{Term: 2, Vote: 2}, nil, true); !errors.Is(err, raftstore.ErrLost) {
				t.Errorf("a vote after it: %v, want ErrLost", err)
			}
		})
	}
}

// TestSaveWithoutTheCheckWritesIntoARemovedDirectory shows what the check
// is for: without it (CheckDirEvery 0, a simulation's setting) the Disk
// acknowledges entries into a log segment that no longer has a name.
func TestSaveWithoutTheCheckWritesIntoARemovedDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node")
	d, err := raftstore.Open(vfs.OS, dir, raftstore.Options{})
	must(t, err)
	defer d.Close()
	must(t, d.Save(raft.HardState{Term: 1, Vote: 1}, ents(1, 3, 1), true))
	must(t, os.RemoveAll(dir))
	if err := d.Save(raft.HardState{}, ents(4, 1, 1), true); err != nil {
		t.Fatalf("Save without the check: %v (the unlinked segment takes it)", err)
	}
}

// TestSaveChecksTheDirectoryAtMostEveryCheckDirEvery: between checks a
// Save of entries does not look (so a removal shows within the period),
// while one that writes a new term or vote always does.
func TestSaveChecksTheDirectoryAtMostEveryCheckDirEvery(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node")
	d, err := raftstore.Open(vfs.OS, dir, raftstore.Options{CheckDirEvery: time.Hour})
	must(t, err)
	defer d.Close()
	must(t, d.Save(raft.HardState{Term: 1, Vote: 1}, ents(1, 3, 1), true)) // checks, finds it
	must(t, os.RemoveAll(dir))
	must(t, d.Save(raft.HardState{}, ents(4, 1, 1), true)) // within the hour: no check
	if err := d.Save(raft.HardState{Term: 2, Vote: 1, Commit: 4}, nil, true); !errors.Is(err, raftstore.ErrLost) {
		t.Fatalf("a new term and vote: %v, want ErrLost", err)
	}
}

func TestOptionsRefuseANegativeCheckDirEvery(t *testing.T) {
	if err := (raftstore.Options{CheckDirEvery: -time.Second}).Validate(); err == nil {
		t.Fatal("Validate accepted a negative CheckDirEvery")
	}
}

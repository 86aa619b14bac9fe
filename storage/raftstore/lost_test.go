package raftstore_test

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io/fs"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/vfs"
	"coord/storage/wal"
)

var identity = raftstore.Identity{ClusterID: 0xc1, NodeID: 3, Created: time.Unix(1700000000, 0)}

// node returns a MemFS holding a node's directory with an identity, a vote
// in term 2, a snapshot and a log of several segments.
func node(t *testing.T) *vfs.MemFS {
	t.Helper()
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.SetIdentity(identity))
	must(t, d.Save(raft.HardState{Term: 2, Vote: 1}, ents(1, 10, 2), true))
	must(t, d.Compact(5, []byte("state at 5"), raft.ConfState{Voters: []uint64{1, 2, 3}}))
	for i := range uint64(30) {
		must(t, d.Save(raft.HardState{Term: 2, Vote: 1, Commit: 10 + i}, ents(11+i, 1, 2), true))
	}
	must(t, d.Close())
	return m
}

func list(t *testing.T, m vfs.FS, dir string) []string {
	t.Helper()
	names, err := m.List(dir)
	must(t, err)
	return names
}

// Each way a directory can lose what a node needs is refused by Open with
// an error that names what is missing, and Open removes nothing: the
// snapshot a lost log leaves behind is still there afterwards.
func TestLostFilesAreRefused(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, m *vfs.MemFS)
		want   error
		text   string
	}{
		{"log directory deleted", func(t *testing.T, m *vfs.MemFS) {
			for _, name := range list(t, m, "/node/wal") {
				must(t, m.Remove("/node/wal/"+name))
			}
			must(t, m.Remove("/node/wal"))
		}, raftstore.ErrLost, "write-ahead log /node/wal is missing"},
		{"every segment deleted", func(t *testing.T, m *vfs.MemFS) {
			for _, name := range list(t, m, "/node/wal") {
				must(t, m.Remove("/node/wal/"+name))
			}
		}, raftstore.ErrLost, "IDENTITY says this directory belongs to node 3"},
		{"newest segment deleted", func(t *testing.T, m *vfs.MemFS) {
			names := list(t, m, "/node/wal")
			must(t, m.Remove("/node/wal/"+names[len(names)-1]))
		}, wal.ErrCorrupt, "is missing"},
		{"snapshot deleted", func(t *testing.T, m *vfs.MemFS) {
			for _, name := range list(t, m, "/node/snap") {
				must(t, m.Remove("/node/snap/"+name))
			}
		}, raftstore.ErrCorrupt, "which is missing"},
		{"log replaced by an empty one", func(t *testing.T, m *vfs.MemFS) {
			for _, name := range list(t, m, "/node/wal") {
				must(t, m.Remove("/node/wal/"+name))
			}
			w, _, err := wal.Open(m, "/node/wal", wal.Options{Logger: quiet})
			must(t, err)
			must(t, w.Close())
		}, raftstore.ErrLost, "the write-ahead log is empty, but VOTE says the node voted in term 2"},
		{"vote file deleted", func(t *testing.T, m *vfs.MemFS) {
			must(t, m.Remove("/node/VOTE"))
		}, raftstore.ErrLost, "VOTE is missing"},
		{"vote file with unknown flags", func(t *testing.T, m *vfs.MemFS) {
			rewrite(t, m, "/node/VOTE", func(b []byte) []byte {
				// Both slots, re-checksummed: a record with flags this
				// build does not know, not a torn one.
				for _, slot := range []int{0, 4096} {
					binary.LittleEndian.PutUint32(b[slot+12:], 2)
					binary.LittleEndian.PutUint32(b[slot+48:], crc32.Checksum(b[slot:slot+48], crc32.MakeTable(crc32.Castagnoli)))
				}
				return b
			})
		}, raftstore.ErrCorrupt, "unknown flags 0x2"},
		{"identity damaged", func(t *testing.T, m *vfs.MemFS) {
			rewrite(t, m, "/node/IDENTITY", func(b []byte) []byte { b[20] ^= 1; return b })
		}, raftstore.ErrCorrupt, "IDENTITY"},
		{"identity and log deleted, snapshot left", func(t *testing.T, m *vfs.MemFS) {
			for _, name := range list(t, m, "/node/wal") {
				must(t, m.Remove("/node/wal/"+name))
			}
			must(t, m.Remove("/node/IDENTITY"))
			must(t, m.Remove("/node/VOTE"))
		}, raftstore.ErrLost, "holds snapshot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := node(t)
			tt.damage(t, m)
			snaps := list(t, m, "/node/snap")
			_, err := raftstore.Open(m, "/node", opts)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("Open: %v\nwant %v mentioning %q", err, tt.want, tt.text)
			}
			if after := list(t, m, "/node/snap"); !slices.Equal(after, snaps) {
				t.Fatalf("the refused Open changed the snapshot directory from %q to %q", snaps, after)
			}
		})
	}
}

// The vote lives in its own file too, written before the log: a log whose
// tail is cut into the record of a vote still comes back with that vote,
// so the node never votes twice in a term.
func TestVoteSurvivesALostLogTail(t *testing.T) {
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.SetIdentity(identity))
	must(t, d.Save(raft.HardState{Term: 1, Commit: 1}, ents(1, 3, 1), true))
	names := list(t, m, "/node/wal")
	data, err := vfs.ReadFile(m, "/node/wal/"+names[len(names)-1])
	must(t, err)
	must(t, d.Save(raft.HardState{Term: 2, Vote: 1, Commit: 1}, nil, true))
	must(t, d.Save(raft.HardState{Term: 2, Vote: 1, Commit: 3}, ents(4, 2, 2), true))
	must(t, d.Close())
	// The first batch ends where the segment's bytes first differ: the
	// file is preallocated, so its length says nothing.
	after, err := vfs.ReadFile(m, "/node/wal/"+names[len(names)-1])
	must(t, err)
	before := 0
	for before < len(data) && data[before] == after[before] {
		before++
	}
	// Cut into the record of the vote: everything after the first batch.
	rewrite(t, m, "/node/wal/"+names[len(names)-1], func(b []byte) []byte { return b[:before+5] })
	d = open(t, m, "/node")
	hs, _, err := d.InitialState()
	must(t, err)
	if hs.Term != 2 || hs.Vote != 1 {
		t.Fatalf("after the log lost the vote's record, hard state %+v: want term 2 vote 1", hs)
	}
	if last, _ := d.LastIndex(); last != 3 {
		t.Fatalf("LastIndex %d, want 3 (the cut tail is gone)", last)
	}
	// The node goes on from there, and cannot vote for anyone else in 2.
	must(t, d.Save(raft.HardState{Term: 2, Vote: 1, Commit: 3}, ents(4, 1, 2), true))
}

func TestIdentity(t *testing.T) {
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	if _, ok := d.Identity(); ok {
		t.Fatal("a new directory has an identity")
	}
	must(t, d.SetIdentity(identity))
	must(t, d.SetIdentity(identity)) // the same: nothing to do
	other := identity
	other.NodeID = 4
	if err := d.SetIdentity(other); !errors.Is(err, raftstore.ErrIdentity) {
		t.Fatalf("SetIdentity of another node: %v, want ErrIdentity", err)
	}
	must(t, d.Close())
	m.Crash() // durable: SetIdentity syncs the file and the directory
	d = open(t, m, "/node")
	got, ok := d.Identity()
	if !ok || got.ClusterID != identity.ClusterID || got.NodeID != identity.NodeID || !got.Created.Equal(identity.Created) {
		t.Fatalf("Identity() = %v %v, want %v", got, ok, identity)
	}
}

// Identity does not wait for a write in progress: a node's status (and
// each request it forwards) asks for it, and must not queue behind an
// fsync. Here the log's sync is held until Identity has answered; a Disk
// that took its lock in Identity would never answer, and the test would
// hang.
func TestIdentityDoesNotWaitForASave(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var hold atomic.Bool
	f := vfs.NewFaultFS(vfs.NewMemFS(), 1, func(op vfs.Op) vfs.Fault {
		if op.Kind == vfs.OpSync && strings.HasPrefix(op.Name, "/node/wal/") && hold.CompareAndSwap(true, false) {
			close(entered)
			<-release
		}
		return vfs.NoFault
	})
	d := open(t, f, "/node")
	must(t, d.SetIdentity(identity))
	hold.Store(true)
	saved := make(chan error)
	go func() { saved <- d.Save(raft.HardState{Term: 1, Vote: 1}, ents(1, 1, 1), true) }()
	<-entered // the Save holds the Disk's lock, in the log's fsync
	got, ok := d.Identity()
	close(release)
	must(t, <-saved)
	if !ok || got.NodeID != identity.NodeID {
		t.Fatalf("Identity() during a Save = %v %v, want %v", got, ok, identity)
	}
}

// A full disk: Save fails with ENOSPC and shows nothing of itself in reads;
// Repair brings the Disk back (while the disk is full, the next Save fails
// again); once space returns, Saves succeed and everything acknowledged
// survives a crash.
func TestSaveOnAFullDiskThenRepair(t *testing.T) {
	m := vfs.NewMemFS()
	f := vfs.NewFaultFS(m, 3, nil)
	d, err := raftstore.Open(f, "/node", opts)
	must(t, err)
	must(t, d.Save(raft.HardState{Term: 1, Commit: 2}, ents(1, 2, 1), true))
	f.SetInjector(vfs.NoSpace())
	for range 3 {
		err := d.Save(raft.HardState{Term: 1, Commit: 2}, ents(3, 4, 1), true)
		if !vfs.IsNoSpace(err) {
			t.Fatalf("Save on a full disk: %v, want ENOSPC", err)
		}
		if last, _ := d.LastIndex(); last != 2 {
			t.Fatalf("a failed Save shows in reads: LastIndex %d", last)
		}
		must(t, d.Repair()) // truncating and syncing need no space
	}
	f.SetInjector(nil)
	must(t, d.Save(raft.HardState{Term: 1, Commit: 6}, ents(3, 4, 1), true))
	must(t, d.Close())
	m.Crash()
	d = open(t, m, "/node")
	got := read(t, d)
	if got.last() != 6 || got.hs.Commit != 6 {
		t.Fatalf("after the disk filled and emptied, recovered %v", got)
	}
}

// A commit index saved without sync, then a write that fails on a full
// disk: Repair takes the log back to its last sync, before that commit
// index, and the next synced Save must make it durable all the same (the
// Save contract: a synced Save covers the unsynced ones before it).
func TestRepairKeepsAnUnsyncedCommitForTheNextSync(t *testing.T) {
	m := vfs.NewMemFS()
	f := vfs.NewFaultFS(m, 3, nil)
	d, err := raftstore.Open(f, "/node", opts)
	must(t, err)
	must(t, d.Save(raft.HardState{Term: 1, Commit: 1}, ents(1, 3, 1), true))
	must(t, d.Save(raft.HardState{Term: 1, Commit: 3}, nil, false))
	f.SetInjector(vfs.NoSpace())
	if err := d.Save(raft.HardState{}, ents(4, 1, 1), true); !vfs.IsNoSpace(err) {
		t.Fatalf("Save on a full disk: %v, want ENOSPC", err)
	}
	must(t, d.Repair())
	f.SetInjector(nil)
	must(t, d.Save(raft.HardState{}, ents(4, 1, 1), true))
	m.Crash()
	d = open(t, m, "/node")
	if hs, _, _ := d.InitialState(); hs.Commit != 3 {
		t.Fatalf("after repair, a synced save and a crash: commit %d, want 3", hs.Commit)
	}
}

// A new node's first Save writes the VOTE file, then the log: a crash at
// any point of it, the window between the two included, leaves a directory
// that opens (an empty log beside that VOTE file is not a lost log) with
// the vote if the VOTE file was written, and with everything if the Save
// returned. Once the log has synced something, a log found empty beside
// the VOTE file is refused again. (The simulator found the window: a
// learner that crashed in its first Save refused to restart, "data lost".)
func TestNewNodeCrashesInItsFirstSave(t *testing.T) {
	hs := raft.HardState{Term: 2, Vote: 1}
	// Count the Save's file system operations.
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.SetIdentity(identity))
	before := m.Ops()
	must(t, d.Save(hs, nil, true))
	total := m.Ops() - before
	for point := 1; point <= total; point++ {
		m := vfs.NewMemFS()
		d := open(t, m, "/node")
		must(t, d.SetIdentity(identity))
		m.SetCrashPoint(point)
		err := d.Save(hs, nil, true)
		m.Crash()
		d, oerr := raftstore.Open(m, "/node", opts)
		if oerr != nil {
			t.Fatalf("crash at operation %d of %d of the first Save (which returned %v): Open: %v", point, total, err, oerr)
		}
		got, _, ierr := d.InitialState()
		must(t, ierr)
		_, voted, verr := readVoteFile(m)
		must(t, verr)
		if (err == nil || voted) && (got.Term != 2 || got.Vote != 1) {
			t.Fatalf("crash at operation %d of %d (Save returned %v, VOTE file written %v): hard state %+v, want term 2 vote 1",
				point, total, err, voted, got)
		}
		must(t, d.Close())
	}

	// After the log's first sync the flag is gone: an emptied log is lost.
	must(t, d.Save(raft.HardState{Term: 2, Vote: 1, Commit: 1}, ents(1, 1, 2), true))
	must(t, d.Close())
	for _, name := range list(t, m, "/node/wal") {
		must(t, m.Remove("/node/wal/"+name))
	}
	w, _, err := wal.Open(m, "/node/wal", wal.Options{Logger: quiet})
	must(t, err)
	must(t, w.Close())
	if _, err := raftstore.Open(m, "/node", opts); !errors.Is(err, raftstore.ErrLost) {
		t.Fatalf("Open of a started log found empty: %v, want ErrLost", err)
	}
}

// readVoteFile reports whether the VOTE file exists (its contents are the
// package's business).
func readVoteFile(m *vfs.MemFS) ([]byte, bool, error) {
	data, err := vfs.ReadFile(m, "/node/VOTE")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	return data, err == nil, err
}

package raftstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"coord/internal/assert"
	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/snapshot"
	"coord/storage/storagetest"
	"coord/storage/vfs"
	"coord/storage/wal"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// small segments, so that tests cross segment boundaries.
// opts removes replaced log segments in place, inside the checkpoint, so
// that a test that crashes or breaks the file system sees the same
// operations in the same order every run; background_test.go checks the
// removal in the background.
var opts = raftstore.Options{SegmentBytes: wal.MinSegmentBytes, Logger: quiet, Background: func(work func()) { work() }}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, fsys vfs.FS, dir string) *raftstore.Disk {
	t.Helper()
	d, err := raftstore.Open(fsys, dir, opts)
	must(t, err)
	return d
}

func TestConformanceMemFS(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storagetest.Storage { return open(t, vfs.NewMemFS(), "/node") })
}

func TestConformanceOS(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storagetest.Storage {
		d := open(t, vfs.OS, filepath.Join(t.TempDir(), "node"))
		t.Cleanup(func() { _ = d.Close() })
		return d
	})
}

// crashing is a Disk that, after every write, is abandoned, loses all that
// was not synced, and is opened again: the conformance suite then checks
// that every acknowledged write survived.
type crashing struct {
	t    *testing.T
	fs   *vfs.MemFS
	disk *raftstore.Disk
}

func (c *crashing) restart() {
	c.fs.Crash()
	c.disk = open(c.t, c.fs, "/node")
}

func (c *crashing) InitialState() (raft.HardState, raft.ConfState, error) {
	return c.disk.InitialState()
}
func (c *crashing) Entries(lo, hi, maxBytes uint64) ([]raft.Entry, error) {
	return c.disk.Entries(lo, hi, maxBytes)
}
func (c *crashing) Term(i uint64) (uint64, error)    { return c.disk.Term(i) }
func (c *crashing) FirstIndex() (uint64, error)      { return c.disk.FirstIndex() }
func (c *crashing) LastIndex() (uint64, error)       { return c.disk.LastIndex() }
func (c *crashing) Snapshot() (raft.Snapshot, error) { return c.disk.Snapshot() }
func (c *crashing) Save(hs raft.HardState, ents []raft.Entry, sync bool) error {
	defer c.restart()
	return c.disk.Save(hs, ents, sync)
}
func (c *crashing) ApplySnapshot(snap raft.Snapshot) error {
	defer c.restart()
	return c.disk.ApplySnapshot(snap)
}
func (c *crashing) Compact(index uint64, data []byte, cs raft.ConfState) error {
	defer c.restart()
	return c.disk.Compact(index, data, cs)
}

func TestConformanceCrashAfterEveryWrite(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storagetest.Storage {
		m := vfs.NewMemFS()
		return &crashing{t: t, fs: m, disk: open(t, m, "/node")}
	})
}

func ents(first, n, term uint64) []raft.Entry {
	var out []raft.Entry
	for i := range n {
		out = append(out, raft.Entry{Term: term, Index: first + i, Data: []byte(fmt.Sprintf("%d@%d", first+i, term))})
	}
	return out
}

func TestSnapshotRemovesOldSegmentsAndFiles(t *testing.T) {
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	for i := range uint64(40) {
		must(t, d.Save(raft.HardState{Term: 1, Commit: i}, ents(i+1, 1, 1), true))
	}
	before, _ := m.List("/node/wal")
	must(t, d.Compact(20, []byte("s20"), raft.ConfState{Voters: []uint64{1}}))
	must(t, d.Compact(38, []byte("s38"), raft.ConfState{Voters: []uint64{1}}))
	after, _ := m.List("/node/wal")
	snaps, _ := m.List("/node/snap")
	if len(before) < 3 || len(after) != 1 {
		t.Fatalf("segments before %d, after two compactions %d: want several, then one", len(before), len(after))
	}
	if len(snaps) != 1 || snaps[0] != snapshot.FileName(38, 1) {
		t.Fatalf("snapshot files %q, want only the newest", snaps)
	}
}

func TestOpenRemovesLeftovers(t *testing.T) {
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.Save(raft.HardState{Term: 1}, ents(1, 5, 1), true))
	must(t, d.Compact(2, []byte("s2"), raft.ConfState{}))
	// A tmp file and a newer, unreferenced snapshot: what a crash in the
	// middle of the next Compact leaves.
	f, err := m.Create("/node/snap/" + snapshot.FileName(4, 1) + ".tmp")
	must(t, err)
	must(t, f.Close())
	_, _, err = snapshot.Write(m, "/node/snap", raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 3, Term: 1}})
	must(t, err)
	must(t, d.Close())
	d = open(t, m, "/node")
	names, _ := m.List("/node/snap")
	if len(names) != 1 || names[0] != snapshot.FileName(2, 1) {
		t.Fatalf("after Open the snapshot directory holds %q, want only the referenced snapshot", names)
	}
	if first, _ := d.FirstIndex(); first != 3 {
		t.Fatalf("FirstIndex = %d, want 3: the unreferenced snapshot must not be used", first)
	}
}

// damaged returns a MemFS holding a node with a snapshot and a log of
// several segments.
func damaged(t *testing.T) *vfs.MemFS {
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.Save(raft.HardState{Term: 1}, ents(1, 10, 1), true))
	must(t, d.Compact(5, []byte("state at 5"), raft.ConfState{Voters: []uint64{1, 2, 3}}))
	for i := range uint64(30) {
		must(t, d.Save(raft.HardState{Term: 1, Commit: i}, ents(11+i, 1, 1), true))
	}
	must(t, d.Close())
	return m
}

func rewrite(t *testing.T, m vfs.FS, name string, change func([]byte) []byte) {
	t.Helper()
	data, err := vfs.ReadFile(m, name)
	must(t, err)
	f, err := m.Create(name)
	must(t, err)
	_, err = f.Write(change(data))
	must(t, err)
	must(t, f.Sync())
	must(t, f.Close())
}

func TestBadFiles(t *testing.T) {
	snapName := "/node/snap/" + snapshot.FileName(5, 1)
	segment := func(t *testing.T, m vfs.FS, i int) string {
		names, err := m.List("/node/wal")
		must(t, err)
		return "/node/wal/" + names[i]
	}
	tests := []struct {
		name   string
		damage func(t *testing.T, m vfs.FS)
		want   []error
		text   string
	}{
		{"corrupt segment", func(t *testing.T, m vfs.FS) {
			rewrite(t, m, segment(t, m, 0), func(b []byte) []byte { b[60] ^= 2; return b })
		}, []error{raftstore.ErrCorrupt, wal.ErrCorrupt}, "segment"},
		{"snapshot truncated into its header", func(t *testing.T, m vfs.FS) {
			rewrite(t, m, snapName, func(b []byte) []byte { return b[:20] })
		}, []error{raftstore.ErrCorrupt, snapshot.ErrCorrupt}, "truncated"},
		{"missing snapshot", func(t *testing.T, m vfs.FS) {
			must(t, m.Remove(snapName))
		}, []error{raftstore.ErrCorrupt}, "missing"},
		{"snapshot whose metadata names another index", func(t *testing.T, m vfs.FS) {
			rewrite(t, m, snapName, func(b []byte) []byte { b[24] ^= 1; return b })
		}, []error{raftstore.ErrCorrupt, snapshot.ErrCorrupt}, "file holds index 4"},
		{"snapshot of a newer version", func(t *testing.T, m vfs.FS) {
			rewrite(t, m, snapName, func(b []byte) []byte { b[8] = 3; return b })
		}, []error{snapshot.ErrUnsupported}, "version 3"},
		{"segment with a wrong magic", func(t *testing.T, m vfs.FS) {
			rewrite(t, m, segment(t, m, 1), func(b []byte) []byte { copy(b, "coordXXX"); return b })
		}, []error{raftstore.ErrCorrupt, wal.ErrCorrupt}, "bad magic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := damaged(t)
			tt.damage(t, m)
			_, err := raftstore.Open(m, "/node", opts)
			for _, want := range tt.want {
				if !errors.Is(err, want) {
					t.Fatalf("Open: %v, want %v", err, want)
				}
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("Open: %v, want it to mention %q", err, tt.text)
			}
		})
	}
}

// Damage inside a snapshot's data is not looked for at Open, which reads
// only the file's header and metadata (a restart reads the file once): it
// shows when the data is read, as an error wrapping ErrCorrupt before the
// data's end, so the node's restore fails, and the files stay as they were.
func TestDamagedSnapshotDataFailsItsReading(t *testing.T) {
	snapName := "/node/snap/" + snapshot.FileName(5, 1)
	tests := []struct {
		name   string
		damage func(t *testing.T, m vfs.FS)
		text   string
	}{
		{"a bit flipped in the data", func(t *testing.T, m vfs.FS) {
			rewrite(t, m, snapName, func(b []byte) []byte { b[len(b)-14] ^= 4; return b })
		}, "checksum"},
		{"truncated data", func(t *testing.T, m vfs.FS) {
			rewrite(t, m, snapName, func(b []byte) []byte { return b[:len(b)-3] })
		}, "the trailer says"},
		{"another snapshot under the same name", func(t *testing.T, m vfs.FS) {
			_, _, err := snapshot.Write(m, "/node/snap", raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 5, Term: 1}, Data: []byte("other")})
			must(t, err)
		}, "the log says"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := damaged(t)
			tt.damage(t, m)
			before, err := vfs.ReadFile(m, snapName)
			must(t, err)
			d, err := raftstore.Open(m, "/node", opts)
			must(t, err)
			defer d.Close()
			snap, err := d.Snapshot()
			must(t, err)
			r, err := snap.Open()
			if err == nil {
				_, err = io.ReadAll(r)
				r.Close()
			}
			if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("reading the snapshot: %v, want ErrCorrupt mentioning %q", err, tt.text)
			}
			after, err := vfs.ReadFile(m, snapName)
			must(t, err)
			if !bytes.Equal(before, after) {
				t.Fatal("the damaged snapshot file was changed")
			}
		})
	}
}

func TestSnapshotReadsTheFile(t *testing.T) {
	m := damaged(t)
	d := open(t, m, "/node")
	snap, err := d.Snapshot()
	must(t, err)
	if snap.Data != nil || snap.Source == nil || snap.Metadata.Index != 5 { // Open read only the header
		t.Fatalf("Snapshot() = %+v, Data %q, Source %v: want the file as a Source", snap.Metadata, snap.Data, snap.Source)
	}
	r, err := snap.Open()
	must(t, err)
	data, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(data) != "state at 5" || snap.Size() != int64(len(data)) {
		t.Fatalf("the Source read %q (size %d), %v; want %q", data, snap.Size(), err, "state at 5")
	}
	// Replaced under the open Disk: Snapshot notices.
	_, _, err = snapshot.Write(m, "/node/snap", raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 5, Term: 1}, Data: []byte("evil")})
	must(t, err)
	// The Source's reader checks the file against the log's checksum.
	snap, err = d.Snapshot()
	must(t, err)
	r, err = snap.Open()
	must(t, err)
	defer r.Close()
	if _, err := io.ReadAll(r); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("reading the Snapshot() of a replaced file: %v, want ErrCorrupt", err)
	}
}

func TestFailedSnapshotWriteIsNotFatal(t *testing.T) {
	m := vfs.NewMemFS()
	f := vfs.NewFaultFS(m, 1, nil)
	d, err := raftstore.Open(f, "/node", opts)
	must(t, err)
	must(t, d.Save(raft.HardState{Term: 1}, ents(1, 5, 1), true))
	f.SetInjector(vfs.FailNth(1, vfs.FaultError, vfs.OpRename))
	if err := d.Compact(3, nil, raft.ConfState{}); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("Compact with a failing rename: %v, want ErrInjected", err)
	}
	if first, _ := d.FirstIndex(); first != 1 {
		t.Fatalf("a failed Compact moved FirstIndex to %d", first)
	}
	must(t, d.Save(raft.HardState{}, ents(6, 1, 1), true))
	must(t, d.Compact(3, nil, raft.ConfState{}))
}

func TestFailedSyncIsFatalUntilReopen(t *testing.T) {
	m := vfs.NewMemFS()
	f := vfs.NewFaultFS(m, 1, nil)
	d, err := raftstore.Open(f, "/node", opts)
	must(t, err)
	must(t, d.Save(raft.HardState{Term: 1}, ents(1, 2, 1), true))
	f.SetInjector(vfs.FailNth(1, vfs.FaultError, vfs.OpSync))
	if err := d.Save(raft.HardState{}, ents(3, 1, 1), true); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("Save with a failing fsync: %v, want wal.ErrFailed", err)
	}
	if last, _ := d.LastIndex(); last != 2 {
		t.Fatalf("an unacknowledged Save shows in reads: LastIndex = %d", last)
	}
	if err := d.Save(raft.HardState{}, ents(3, 1, 1), true); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("Save after a failed fsync: %v, want wal.ErrFailed", err)
	}
	_ = d.Close()
	d = open(t, m, "/node")
	must(t, d.Save(raft.HardState{}, ents(3, 2, 1), true))
}

func TestClosed(t *testing.T) {
	d := open(t, vfs.NewMemFS(), "/node")
	must(t, d.Close())
	must(t, d.Close())
	for what, err := range map[string]error{
		"Save":          d.Save(raft.HardState{Term: 1}, nil, true),
		"Compact":       d.Compact(1, nil, raft.ConfState{}),
		"ApplySnapshot": d.ApplySnapshot(raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 1}}),
		"LastIndex":     func() error { _, err := d.LastIndex(); return err }(),
		"Entries":       func() error { _, err := d.Entries(1, 1, 0); return err }(),
	} {
		if !errors.Is(err, raftstore.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", what, err)
		}
	}
}

// TestSecondOpenIsRefused: two nodes appending to one log would interleave
// their records, so a directory in use cannot be opened again, on a real
// disk (flock) or in memory, until the first Disk is closed.
func TestSecondOpenIsRefused(t *testing.T) {
	for name, fsys := range map[string]vfs.FS{"OS": vfs.OS, "MemFS": vfs.NewMemFS()} {
		t.Run(name, func(t *testing.T) {
			dir := "/node"
			if name == "OS" {
				dir = t.TempDir()
			}
			d := open(t, fsys, dir)
			must(t, d.Save(raft.HardState{Term: 2, Vote: 1}, []raft.Entry{{Term: 2, Index: 1}}, true))
			if _, err := raftstore.Open(fsys, dir, raftstore.Options{}); !errors.Is(err, vfs.ErrLocked) {
				t.Fatalf("second Open: %v, want ErrLocked", err)
			}
			must(t, d.Close())
			d2 := open(t, fsys, dir)
			if last, err := d2.LastIndex(); err != nil || last != 1 {
				t.Fatalf("reopened: last index %d, %v", last, err)
			}
			must(t, d2.Close())
		})
	}
}

func TestBadOptions(t *testing.T) {
	_, err := raftstore.Open(vfs.NewMemFS(), "/node", raftstore.Options{SegmentBytes: 1})
	if err == nil || !strings.Contains(err.Error(), "SegmentBytes") {
		t.Fatalf("Open with SegmentBytes 1: %v, want an error naming the field", err)
	}
}

func TestProgrammerErrorsPanic(t *testing.T) {
	cases := map[string]func(d *raftstore.Disk){
		"gap":            func(d *raftstore.Disk) { _ = d.Save(raft.HardState{}, ents(5, 1, 1), true) },
		"not contiguous": func(d *raftstore.Disk) { _ = d.Save(raft.HardState{}, append(ents(1, 1, 1), ents(3, 1, 1)...), true) },
		"term goes back": func(d *raftstore.Disk) { _ = d.Save(raft.HardState{Term: 1}, nil, true) },
		"second vote":    func(d *raftstore.Disk) { _ = d.Save(raft.HardState{Term: 2, Vote: 3}, nil, true) },
		"lo > hi":        func(d *raftstore.Disk) { _, _ = d.Entries(3, 2, 0) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			d := open(t, vfs.NewMemFS(), "/node")
			must(t, d.Save(raft.HardState{Term: 2, Vote: 1}, nil, true))
			defer func() {
				if _, ok := recover().(assert.Failure); !ok {
					t.Fatal("no assertion failure")
				}
			}()
			f(d)
		})
	}
}

// Data saved is copied: the caller may reuse its buffers.
func TestSaveCopiesData(t *testing.T) {
	d := open(t, vfs.NewMemFS(), "/node")
	buf := []byte("original")
	must(t, d.Save(raft.HardState{}, []raft.Entry{{Term: 1, Index: 1, Data: buf}}, true))
	copy(buf, "CHANGED!")
	got, err := d.Entries(1, 2, 0)
	must(t, err)
	if !bytes.Equal(got[0].Data, []byte("original")) {
		t.Fatalf("entry data changed with the caller's buffer: %q", got[0].Data)
	}
}

func TestCrashConformance(t *testing.T) {
	storagetest.RunCrash(t, func(t *testing.T) storagetest.Crashable {
		m := vfs.NewMemFS()
		return storagetest.Crashable{Storage: open(t, m, "/node"), Crash: func() storagetest.Storage {
			m.Crash()
			return open(t, m, "/node")
		}}
	})
}

func TestCrashConformanceTorn(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			storagetest.RunCrash(t, func(t *testing.T) storagetest.Crashable {
				m := vfs.NewMemFS()
				rng := rand.New(rand.NewPCG(seed, 7))
				return storagetest.Crashable{Storage: open(t, m, "/node"), Crash: func() storagetest.Storage {
					m.CrashTorn(rng)
					return open(t, m, "/node")
				}}
			})
		})
	}
}

// TestUnsyncedCommitIsNotSynced: a Save without sync that changes only the
// commit index costs no fsync (the second fsync of every write on a leader,
// whose commit-only Ready follows the one that appended): a power loss
// right after it loses it. A Save with sync, or one that also changes the
// vote or appends, keeps it.
func TestUnsyncedCommitIsNotSynced(t *testing.T) {
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.Save(raft.HardState{Term: 2, Vote: 1, Commit: 1}, ents(1, 3, 2), true))
	must(t, d.Save(raft.HardState{Term: 2, Vote: 1, Commit: 3}, nil, false))
	m.Crash()
	d = open(t, m, "/node")
	if hs, _, _ := d.InitialState(); hs.Commit != 1 {
		t.Fatalf("after a crash, commit %d: the unsynced commit index 3 was synced (want 1)", hs.Commit)
	}
	must(t, d.Save(raft.HardState{Term: 2, Vote: 1, Commit: 2}, nil, true))
	m.Crash()
	d = open(t, m, "/node")
	if hs, _, _ := d.InitialState(); hs.Commit != 2 {
		t.Fatalf("after a crash, commit %d: the synced commit index 2 was lost", hs.Commit)
	}
}

package raftstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/snapshot"
	"coord/storage/storagetest"
	"coord/storage/vfs"
)

// writerFunc is an io.WriterTo that runs a function when it is written:
// the test does the node's work "while" the snapshot streams.
type writerFunc func(w io.Writer) (int64, error)

func (f writerFunc) WriteTo(w io.Writer) (int64, error) { return f(w) }

func entries(lo, hi, term uint64) []raft.Entry {
	var ents []raft.Entry
	for i := lo; i <= hi; i++ {
		ents = append(ents, raft.Entry{Index: i, Term: term, Data: []byte{byte(i)}})
	}
	return ents
}

// TestWriteSnapshotWhileSaving streams a snapshot at index 5 in pieces
// while entries 11 to 20 are saved (what the node does meanwhile), then
// compacts to it: after a crash and a reopen, the snapshot is the one
// streamed, and every entry after it is there.
func TestWriteSnapshotWhileSaving(t *testing.T) {
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.Save(raft.HardState{Term: 1, Commit: 10}, entries(1, 10, 1), true))
	meta := raft.SnapshotMetadata{Index: 5, Term: 1, ConfState: raft.ConfState{Voters: []uint64{1, 2, 3}}}
	state := bytes.Repeat([]byte("state at 5 "), 1000)
	err := d.WriteSnapshot(meta, writerFunc(func(w io.Writer) (int64, error) {
		var n int64
		for i, p := 0, state; len(p) > 0; i++ {
			k := min(len(p), 700)
			if _, err := w.Write(p[:k]); err != nil {
				return n, err
			}
			n += int64(k)
			p = p[k:]
			if i == 3 {
				must(t, d.Save(raft.HardState{Term: 1, Commit: 20}, entries(11, 20, 1), true))
			}
		}
		return n, nil
	}))
	must(t, err)
	if first, _ := d.FirstIndex(); first != 1 {
		t.Fatalf("FirstIndex %d before CompactTo, want 1: the written file is not yet the snapshot", first)
	}
	must(t, d.CompactTo(meta))
	m.Crash()
	d = open(t, m, "/node")
	snap, err := d.Snapshot()
	must(t, err)
	if data := storagetest.SnapshotData(t, snap); snap.Metadata.Index != 5 || snap.Metadata.Term != 1 || !bytes.Equal(data, state) ||
		!snap.Metadata.ConfState.Equal(meta.ConfState) {
		t.Fatalf("snapshot after reopening: %+v with %d bytes, want index 5 term 1 with %d bytes", snap.Metadata, len(data), len(state))
	}
	ents, err := d.Entries(6, 21, 1<<20)
	must(t, err)
	if len(ents) != 15 || ents[0].Index != 6 || ents[14].Index != 20 {
		t.Fatalf("entries after the snapshot: %d, want 6 to 20", len(ents))
	}
}

// TestWriteSnapshotOvertaken installs a snapshot from the leader while one
// is being written: the install leaves the file being written alone, and
// CompactTo then discards it with ErrSnapshotOutOfDate, leaving the
// leader's snapshot and no other file.
func TestWriteSnapshotOvertaken(t *testing.T) {
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.Save(raft.HardState{Term: 1, Commit: 10}, entries(1, 10, 1), true))
	mine := raft.SnapshotMetadata{Index: 5, Term: 1, ConfState: raft.ConfState{Voters: []uint64{1}}}
	leaders := raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 30, Term: 2, ConfState: raft.ConfState{Voters: []uint64{1}}}, Data: []byte("leader")}
	err := d.WriteSnapshot(mine, writerFunc(func(w io.Writer) (int64, error) {
		n, err := w.Write([]byte("half"))
		if err != nil {
			return int64(n), err
		}
		must(t, d.ApplySnapshot(leaders))
		k, err := w.Write([]byte(" and the rest"))
		return int64(n + k), err
	}))
	must(t, err)
	if err := d.CompactTo(mine); !errors.Is(err, raft.ErrSnapshotOutOfDate) {
		t.Fatalf("CompactTo after a newer snapshot: %v, want ErrSnapshotOutOfDate", err)
	}
	files, tmps, err := snapshot.List(m, "/node/snap")
	must(t, err)
	if len(files) != 1 || files[0].Index != 30 || len(tmps) != 0 {
		t.Fatalf("snapshot files %+v, temporary %q: want only the leader's at 30", files, tmps)
	}
	if err := d.WriteSnapshot(mine, writerFunc(func(io.Writer) (int64, error) { return 0, nil })); !errors.Is(err, raft.ErrSnapshotOutOfDate) {
		t.Fatalf("WriteSnapshot below the snapshot: %v, want ErrSnapshotOutOfDate", err)
	}
}

// TestWriteSnapshotCrashBeforeCompact crashes after the file is durable
// but before CompactTo: the reopened Disk has its old log and no snapshot,
// and the unused file is gone.
func TestWriteSnapshotCrashBeforeCompact(t *testing.T) {
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.Save(raft.HardState{Term: 1, Commit: 10}, entries(1, 10, 1), true))
	meta := raft.SnapshotMetadata{Index: 8, Term: 1, ConfState: raft.ConfState{Voters: []uint64{1}}}
	must(t, d.WriteSnapshot(meta, bytes.NewReader([]byte("state"))))
	m.Crash()
	d = open(t, m, "/node")
	if first, _ := d.FirstIndex(); first != 1 {
		t.Fatalf("FirstIndex %d, want 1", first)
	}
	files, tmps, err := snapshot.List(m, "/node/snap")
	must(t, err)
	if len(files) != 0 || len(tmps) != 0 {
		t.Fatalf("snapshot files %+v, temporary %q after reopening: want none", files, tmps)
	}
}

// TestWriteSnapshotFails: a failing data stream leaves no file, and
// CompactTo refuses a snapshot that was not written.
func TestWriteSnapshotFails(t *testing.T) {
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.Save(raft.HardState{Term: 1, Commit: 10}, entries(1, 10, 1), true))
	meta := raft.SnapshotMetadata{Index: 8, Term: 1, ConfState: raft.ConfState{Voters: []uint64{1}}}
	boom := errors.New("encoder failed")
	err := d.WriteSnapshot(meta, writerFunc(func(w io.Writer) (int64, error) { return 0, boom }))
	if !errors.Is(err, boom) {
		t.Fatalf("WriteSnapshot: %v, want %v", err, boom)
	}
	if err := d.CompactTo(meta); err == nil {
		t.Fatal("CompactTo a snapshot whose write failed succeeded")
	}
	files, tmps, err := snapshot.List(m, "/node/snap")
	must(t, err)
	if len(files) != 0 || len(tmps) != 0 {
		t.Fatalf("snapshot files %+v, temporary %q: want none", files, tmps)
	}
}

// countingFS counts the bytes read from files.
type countingFS struct {
	vfs.FS
	read *int64
}

func (c countingFS) Open(name string) (vfs.File, error) {
	f, err := c.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return countingFile{f, c.read}, nil
}

type countingFile struct {
	vfs.File
	read *int64
}

func (f countingFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	*f.read += int64(n)
	return n, err
}

// Size keeps the file's size visible through the wrapper.
func (f countingFile) Size() (int64, error) { return vfs.FileSize(f.File) }

// TestRestartReadsSnapshotOnce: Open reads only the snapshot file's header
// and metadata (and takes its size), not its data; the node's restore then
// reads the file once, through the Source, which verifies it.
func TestRestartReadsSnapshotOnce(t *testing.T) {
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.Save(raft.HardState{Term: 1, Commit: 10}, entries(1, 10, 1), true))
	state := bytes.Repeat([]byte("state at 8 "), 10000) // 110 kB
	must(t, d.Compact(8, state, raft.ConfState{Voters: []uint64{1}}))
	must(t, d.Close())
	var read int64
	d = open(t, countingFS{m, &read}, "/node")
	atOpen := read
	snap, err := d.Snapshot()
	must(t, err)
	if snap.Data != nil || snap.Source == nil || snap.Size() != int64(len(state)) {
		t.Fatalf("Snapshot after Open: %d bytes in memory, Source %v of %d bytes; want a Source of %d, unread", len(snap.Data), snap.Source, snap.Size(), len(state))
	}
	if data := storagetest.SnapshotData(t, snap); !bytes.Equal(data, state) {
		t.Fatalf("the Source read %d bytes, want the %d of the state", len(data), len(state))
	}
	restored := read - atOpen
	if restored < int64(len(state)) || restored > int64(len(state))+1024 {
		t.Fatalf("reading the Source read %d bytes, want the file once (%d bytes of data, a header and a trailer)", restored, len(state))
	}
	if atOpen > restored/10 {
		t.Fatalf("Open read %d bytes (the WAL's and the snapshot's header), the restore %d: Open read the snapshot's data", atOpen, restored)
	}
}

// TestCompactToCrashBeforeSegmentRemoval crashes after CompactTo returned
// but before the removal of the log segments its checkpoint replaced ran
// (Options.Background holds it): the reopened Disk has the snapshot and
// every entry after it, and the leftover segments are gone.
func TestCompactToCrashBeforeSegmentRemoval(t *testing.T) {
	for _, torn := range []bool{false, true} {
		m := vfs.NewMemFS()
		var held []func()
		o := opts
		o.Background = func(work func()) { held = append(held, work) }
		d, err := raftstore.Open(m, "/node", o)
		must(t, err)
		for i := uint64(1); i <= 40; i += 10 {
			must(t, d.Save(raft.HardState{Term: 1, Commit: i + 9}, entries(i, i+9, 1), true))
		}
		before, err := m.List("/node/wal")
		must(t, err)
		meta := raft.SnapshotMetadata{Index: 30, Term: 1, ConfState: raft.ConfState{Voters: []uint64{1}}}
		must(t, d.WriteSnapshot(meta, bytes.NewReader([]byte("state at 30"))))
		must(t, d.CompactTo(meta))
		after, err := m.List("/node/wal")
		must(t, err)
		if len(before) < 2 || len(held) != 1 || len(after) != len(before)+1 {
			t.Fatalf("segments before %q, after CompactTo %q, %d removals held: want several, none removed yet, one held",
				before, after, len(held))
		}
		if torn {
			m.CrashTorn(rand.New(rand.NewPCG(3, 4)))
		} else {
			m.Crash()
		}
		d = open(t, m, "/node")
		snap, err := d.Snapshot()
		must(t, err)
		if data := storagetest.SnapshotData(t, snap); snap.Metadata.Index != 30 || string(data) != "state at 30" {
			t.Fatalf("torn %v: snapshot after reopening: %+v %q, want index 30", torn, snap.Metadata, data)
		}
		ents, err := d.Entries(31, 41, 1<<20)
		must(t, err)
		if len(ents) != 10 || ents[0].Index != 31 || ents[9].Index != 40 {
			t.Fatalf("torn %v: %d entries after the snapshot, want 31 to 40", torn, len(ents))
		}
		if names, _ := m.List("/node/wal"); len(names) != 1 || names[0] != after[len(after)-1] {
			t.Fatalf("torn %v: segments after reopening %q, want only %s", torn, names, after[len(after)-1])
		}
		must(t, d.Close())
	}
}

// TestCompactToLeavesSnapshotRemovalToBackground: the snapshot file a
// CompactTo replaces is renamed on the caller's goroutine (the node's
// loop), never removed there, nor is the snapshot directory synced: the
// removal and the sync are work handed to Options.Background. A crash
// before that work runs leaves the new snapshot and no other file after a
// reopen; once it runs, the replaced file is gone.
func TestCompactToLeavesSnapshotRemovalToBackground(t *testing.T) {
	for _, crash := range []bool{false, true} {
		m := vfs.NewMemFS()
		var ops []vfs.Op
		f := vfs.NewFaultFS(m, 1, func(op vfs.Op) vfs.Fault { ops = append(ops, op); return vfs.NoFault })
		var held []func()
		o := opts
		o.Background = func(work func()) { held = append(held, work) }
		d, err := raftstore.Open(f, "/node", o)
		must(t, err)
		must(t, d.Save(raft.HardState{Term: 1, Commit: 30}, entries(1, 30, 1), true))
		for _, i := range []uint64{10, 20} {
			meta := raft.SnapshotMetadata{Index: i, Term: 1, ConfState: raft.ConfState{Voters: []uint64{1}}}
			must(t, d.WriteSnapshot(meta, bytes.NewReader([]byte(fmt.Sprintf("state at %d", i)))))
			held, ops = nil, nil
			must(t, d.CompactTo(meta))
		}
		for _, op := range ops {
			if strings.HasPrefix(op.Name, "/node/snap") && (op.Kind == vfs.OpRemove || op.Kind == vfs.OpSyncDir) {
				t.Fatalf("CompactTo did %s %s itself: the replaced snapshot's removal belongs in the background", op.Kind, op.Name)
			}
		}
		old := snapshot.FileName(10, 1)
		names, err := m.List("/node/snap")
		must(t, err)
		if !slices.Contains(names, old+".retired.tmp") || slices.Contains(names, old) {
			t.Fatalf("snapshot directory after CompactTo: %q, want %s renamed, not removed", names, old)
		}
		if len(held) != 2 { // the log segments' removal and the snapshot file's
			t.Fatalf("%d pieces of work handed to Options.Background, want 2", len(held))
		}
		if crash {
			m.Crash()
		} else {
			for _, work := range held {
				work()
			}
			names, err := m.List("/node/snap")
			must(t, err)
			if want := []string{snapshot.FileName(20, 1)}; !slices.Equal(names, want) {
				t.Fatalf("snapshot directory once the background work ran: %q, want %q", names, want)
			}
			must(t, d.Close())
		}
		d = open(t, m, "/node")
		snap, err := d.Snapshot()
		must(t, err)
		if data := storagetest.SnapshotData(t, snap); snap.Metadata.Index != 20 || string(data) != "state at 20" {
			t.Fatalf("crash %v: snapshot after reopening: %+v %q, want index 20", crash, snap.Metadata, data)
		}
		if names, _ := m.List("/node/snap"); !slices.Equal(names, []string{snapshot.FileName(20, 1)}) {
			t.Fatalf("crash %v: snapshot directory after reopening: %q", crash, names)
		}
		must(t, d.Close())
	}
}

// TestCloseWaitsForSnapshotRemoval: with Options.Background nil, the
// replaced snapshot file is removed on a goroutine of the Disk's own, and
// Close returns only once that removal ended: a closed Disk leaves no
// goroutine behind, and the directory holds the current snapshot alone.
func TestCloseWaitsForSnapshotRemoval(t *testing.T) {
	m := vfs.NewMemFS()
	d, err := raftstore.Open(m, "/node", raftstore.Options{SegmentBytes: opts.SegmentBytes, Logger: opts.Logger})
	must(t, err)
	must(t, d.Save(raft.HardState{Term: 1, Commit: 30}, entries(1, 30, 1), true))
	for _, i := range []uint64{10, 20} {
		meta := raft.SnapshotMetadata{Index: i, Term: 1, ConfState: raft.ConfState{Voters: []uint64{1}}}
		must(t, d.WriteSnapshot(meta, bytes.NewReader([]byte(fmt.Sprintf("state at %d", i)))))
		must(t, d.CompactTo(meta))
	}
	must(t, d.Close())
	names, err := m.List("/node/snap")
	must(t, err)
	if want := []string{snapshot.FileName(20, 1)}; !slices.Equal(names, want) {
		t.Fatalf("snapshot directory after Close: %q, want %q", names, want)
	}
}

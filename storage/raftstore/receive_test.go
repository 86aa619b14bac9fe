package raftstore_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/snapshot"
	"coord/storage/storagetest"
	"coord/storage/vfs"
)

var leaderMeta = raft.SnapshotMetadata{Index: 50, Term: 3, ConfState: raft.ConfState{Voters: []uint64{1, 2, 3}}}

// spool receives data as a leader's snapshot at leaderMeta, in pieces of
// piece bytes, and commits it.
func spool(t *testing.T, d *raftstore.Disk, data []byte, piece int) raft.Snapshot {
	t.Helper()
	s, err := d.ReceiveSnapshot(leaderMeta, int64(len(data)))
	must(t, err)
	for p := data; len(p) > 0; {
		n := min(piece, len(p))
		if _, err := s.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	src, err := s.Commit()
	must(t, err)
	return raft.Snapshot{Metadata: leaderMeta, Source: src}
}

// snapFiles lists the snapshot directory.
func snapFiles(t *testing.T, fsys vfs.FS) []string {
	t.Helper()
	names, err := fsys.List("/node/snap")
	must(t, err)
	return names
}

// createCounter counts the files created.
type createCounter struct {
	vfs.FS
	creates *int
}

func (c createCounter) Create(name string) (vfs.File, error) {
	*c.creates++
	return c.FS.Create(name)
}

func (c createCounter) CreateWriteAt(name string) (vfs.WriteAtFile, error) {
	*c.creates++
	return c.FS.CreateWriteAt(name)
}

// A snapshot received in pieces is spooled to the snapshot directory and
// adopted where it lies: ApplySnapshot writes no snapshot file, and the
// reopened Disk holds it.
func TestReceivedSnapshotIsAdoptedNotCopied(t *testing.T) {
	m := vfs.NewMemFS()
	creates := 0
	d := open(t, createCounter{m, &creates}, "/node")
	must(t, d.Save(raft.HardState{Term: 1, Commit: 3}, ents(1, 5, 1), true))
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB, in 1 KiB pieces
	snap := spool(t, d, data, 1024)
	if snap.Size() != int64(len(data)) {
		t.Fatalf("spooled Size %d, want %d", snap.Size(), len(data))
	}
	if got := storagetest.SnapshotData(t, snap); !bytes.Equal(got, data) {
		t.Fatal("the spooled file's data differs from what was received")
	}
	before := creates
	must(t, d.ApplySnapshot(snap))
	for _, name := range snapFiles(t, m) {
		if strings.HasSuffix(name, ".snap") {
			continue
		}
		t.Fatalf("snapshot directory holds %q after the install", name)
	}
	// The log's checkpoint is a new segment: one file, no snapshot file.
	if created := creates - before; created != 1 {
		t.Fatalf("ApplySnapshot created %d files, want 1 (the log segment): the spooled file must be adopted, not copied", created)
	}
	// The Source handed out before the adoption still reads the file.
	if got := storagetest.SnapshotData(t, snap); !bytes.Equal(got, data) {
		t.Fatal("the Source no longer reads the adopted file")
	}
	must(t, d.Close())

	d = open(t, m, "/node")
	got, err := d.Snapshot()
	must(t, err)
	if got.Metadata.Index != 50 || !bytes.Equal(storagetest.SnapshotData(t, got), data) {
		t.Fatalf("after reopening: snapshot at %d, want 50 with the received data", got.Metadata.Index)
	}
	if first, _ := d.FirstIndex(); first != 51 {
		t.Fatalf("FirstIndex %d after the install, want 51", first)
	}
}

// A crash between the spool and the adoption, or in the middle of the
// spool, leaves the old state and no file behind once reopened.
func TestCrashBeforeAdoptionIsClean(t *testing.T) {
	for _, committed := range []bool{false, true} {
		m := vfs.NewMemFS()
		d := open(t, m, "/node")
		must(t, d.Save(raft.HardState{Term: 1, Commit: 3}, ents(1, 5, 1), true))
		must(t, d.Compact(3, []byte("state at 3"), raft.ConfState{Voters: []uint64{1}}))
		s, err := d.ReceiveSnapshot(leaderMeta, 10)
		must(t, err)
		if _, err := s.Write([]byte("01234")); err != nil {
			t.Fatal(err)
		}
		if committed {
			if _, err := s.Write([]byte("56789")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		m.Crash()
		d = open(t, m, "/node")
		snap, err := d.Snapshot()
		must(t, err)
		if snap.Metadata.Index != 3 || string(storagetest.SnapshotData(t, snap)) != "state at 3" {
			t.Fatalf("committed=%v: after the crash, snapshot at %d, want the old one at 3", committed, snap.Metadata.Index)
		}
		if last, _ := d.LastIndex(); last != 5 {
			t.Fatalf("committed=%v: LastIndex %d after the crash, want 5", committed, last)
		}
		if names := snapFiles(t, m); len(names) != 1 {
			t.Fatalf("committed=%v: snapshot directory holds %v after reopening, want the one snapshot", committed, names)
		}
		must(t, d.Close())
	}
}

// Bad streams are refused, leave no file, and change nothing.
func TestBadReceivedSnapshots(t *testing.T) {
	m := vfs.NewMemFS()
	f := vfs.NewFaultFS(m, 1, nil)
	d := open(t, f, "/node")
	must(t, d.Save(raft.HardState{Term: 1, Commit: 5}, ents(1, 5, 1), true))
	unchanged := func(what string) {
		t.Helper()
		if names := snapFiles(t, m); len(names) != 0 {
			t.Fatalf("%s: snapshot directory holds %v", what, names)
		}
		if first, _ := d.FirstIndex(); first != 1 {
			t.Fatalf("%s: FirstIndex moved to %d", what, first)
		}
	}

	// Cut short: fewer bytes than announced.
	s, err := d.ReceiveSnapshot(leaderMeta, 10)
	must(t, err)
	_, _ = s.Write([]byte("short"))
	if _, err := s.Commit(); err == nil || !strings.Contains(err.Error(), "ended after 5 of 10 bytes") {
		t.Fatalf("Commit of a short snapshot: %v", err)
	}
	unchanged("short")

	// Oversize: more bytes than announced.
	s, err = d.ReceiveSnapshot(leaderMeta, 4)
	must(t, err)
	if _, err := s.Write([]byte("too long")); err == nil || !strings.Contains(err.Error(), "past the 4 bytes announced") {
		t.Fatalf("Write past the size: %v", err)
	}
	must(t, s.Abort())
	unchanged("oversize")

	// Stale: at or below the commit index, refused before a byte is kept.
	stale := leaderMeta
	stale.Index = 5
	if _, err := d.ReceiveSnapshot(stale, 10); !errors.Is(err, raft.ErrSnapshotOutOfDate) {
		t.Fatalf("ReceiveSnapshot at the commit index: %v, want ErrSnapshotOutOfDate", err)
	}
	unchanged("stale")

	// A full disk: the write fails saying so; aborted, nothing stays.
	s, err = d.ReceiveSnapshot(leaderMeta, 1<<20)
	must(t, err)
	f.SetInjector(vfs.NoSpace())
	_, err = s.Write(make([]byte, 64<<10))
	if !vfs.IsNoSpace(err) {
		t.Fatalf("Write on a full disk: %v, want ENOSPC", err)
	}
	f.SetInjector(nil)
	must(t, s.Abort())
	unchanged("full disk")

	// A corrupt spooled file (a bit flipped on the disk after it was
	// written) is caught by its reader, at the latest with the last bytes.
	snap := spool(t, d, []byte("0123456789"), 3)
	path := snap.Source.(*snapshot.Source).Path()
	raw, err := vfs.ReadFile(m, path)
	must(t, err)
	raw[len(raw)-15] ^= 1 // in the data
	w, err := m.Create(path)
	must(t, err)
	_, _ = w.Write(raw)
	must(t, w.Close())
	r, err := snap.Open()
	must(t, err)
	buf := make([]byte, 10)
	if n, err := r.Read(buf); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("reading a corrupt spooled file: %d bytes, %v, want ErrCorrupt", n, err)
	}
	r.Close()
}

// A spooled snapshot the core never takes (stale by the time it arrives,
// or dropped) is removed once the Disk moves past it.
func TestUnusedReceivedSnapshotIsRemoved(t *testing.T) {
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.Save(raft.HardState{Term: 1, Commit: 5}, ents(1, 5, 1), true))
	_ = spool(t, d, []byte("never installed"), 4)
	newer := raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 60, Term: 3}, Data: []byte("state at 60")}
	must(t, d.ApplySnapshot(newer))
	names := snapFiles(t, m)
	if len(names) != 1 || names[0] != snapshot.FileName(60, 3) {
		t.Fatalf("snapshot directory holds %v, want only the installed snapshot", names)
	}
}

package tcp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/snapshot"
	"coord/storage/vfs"
)

// patternSource is a snapshot's data made up as it is read (nothing held in
// memory), optionally failing at the end as a damaged file's reader does.
type patternSource struct {
	size    int64
	failEnd bool
}

func (s patternSource) Size() int64 { return s.size }

func (s patternSource) Open() (io.ReadCloser, error) {
	return io.NopCloser(&patternReader{left: s.size, failEnd: s.failEnd}), nil
}

type patternReader struct {
	off, left int64
	failEnd   bool
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), r.left))
	for i := range n {
		p[i] = byte((r.off + int64(i)) * 7)
	}
	r.off += int64(n)
	r.left -= int64(n)
	if r.left == 0 && r.failEnd {
		return 0, errors.New("checksum mismatch (a damaged file)")
	}
	return n, nil
}

// diskSpool is a receiver's spool into a real raftstore.Disk, recording the
// largest piece written and telling when a stream was aborted.
type diskSpool struct {
	disk    *raftstore.Disk
	mu      sync.Mutex
	largest int
	aborted chan struct{}
}

func newDiskSpool(t testing.TB, dir string) *diskSpool {
	d, err := raftstore.Open(vfs.OS, dir, raftstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return &diskSpool{disk: d, aborted: make(chan struct{}, 16)}
}

func (s *diskSpool) spool(m raft.Message, size int64) (SnapshotSpool, error) {
	sp, err := s.disk.ReceiveSnapshot(m.Snapshot.Metadata, size)
	if err != nil {
		return nil, err
	}
	return &recordingSpool{Spool: sp, s: s}, nil
}

type recordingSpool struct {
	*raftstore.Spool
	s *diskSpool
}

func (r *recordingSpool) Write(p []byte) (int, error) {
	r.s.mu.Lock()
	r.s.largest = max(r.s.largest, len(p))
	r.s.mu.Unlock()
	return r.Spool.Write(p)
}

func (r *recordingSpool) Abort() error {
	err := r.Spool.Abort()
	r.s.aborted <- struct{}{}
	return err
}

func (s *diskSpool) waitAborted(t *testing.T) {
	t.Helper()
	select {
	case <-s.aborted:
	case <-time.After(waitMax):
		t.Fatal("the spool was not aborted")
	}
}

// noFilesBut checks the snapshot directory holds nothing but want.
func noFilesBut(t *testing.T, dir string, want ...string) {
	t.Helper()
	names, err := vfs.OS.List(filepath.Join(dir, "snap"))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("snapshot directory holds %v, want %v", names, want)
	}
}

func snapshotMessage(size int64, failEnd bool) raft.Message {
	return raft.Message{Type: raft.MsgSnapshotRequest, From: 1, To: 2, Term: 4, Snapshot: raft.Snapshot{
		Metadata: raft.SnapshotMetadata{Index: 100, Term: 4, ConfState: raft.ConfState{Voters: []uint64{1, 2}}},
		Source:   patternSource{size: size, failEnd: failEnd},
	}}
}

// The old design held a received snapshot in memory, bounded by
// MaxSnapshotBytes: set that bound small, and a larger snapshot is refused
// without a spool, and streams to the disk with one, a chunk at a time,
// from a Source on the sender's side that is never held whole either.
func TestSnapshotLargerThanTheMemoryBoundStreamsToTheSpool(t *testing.T) {
	const size = 3<<20 + 12345 // 3 MiB and a partial chunk, against a 1 MiB bound
	dir := filepath.Join(t.TempDir(), "node2")
	ds := newDiskSpool(t, dir)

	// Without a spool, the bound holds, as before.
	a, b := startPair(t, func(c *Config) {
		c.SnapshotChunkBytes = 64 << 10
		c.MaxSnapshotBytes = 1 << 20
	})
	waitConnected(t, a, 2)
	a.Send([]raft.Message{snapshotMessage(size, false)})
	b.log.waitFor(t, "over limit 1048576")
	if b.in.len() != 0 {
		t.Fatal("a snapshot over the bound was delivered")
	}

	// With a spool and no bound: it streams.
	reports := make(chan bool, 4)
	a, b = startPair(t, func(c *Config) {
		c.SnapshotChunkBytes = 64 << 10
		c.MaxSnapshotBytes = 0
		c.SnapshotDone = func(_ uint64, failed bool) { reports <- failed }
		if c.ID == 2 {
			c.SpoolSnapshot = ds.spool
		}
	})
	waitConnected(t, a, 2)
	a.Send([]raft.Message{snapshotMessage(size, false)})
	got := b.in.waitFor(t, 1)[0]
	if got.Type != raft.MsgSnapshotRequest || got.Snapshot.Data != nil || got.Snapshot.Source == nil ||
		got.Snapshot.Size() != size || got.Snapshot.Metadata.Index != 100 {
		t.Fatalf("delivered %v with %d bytes in memory, a Source %T of %d bytes; want the snapshot at 100 in a spooled file",
			got.Type, len(got.Snapshot.Data), got.Snapshot.Source, got.Snapshot.Size())
	}
	r, err := got.Snapshot.Open()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := snapshotMessage(size, false).Snapshot.Open()
	if !sameStream(t, r, want) {
		t.Fatal("the spooled data differs from what was sent")
	}
	r.Close()
	if ds.largest > 64<<10 {
		t.Fatalf("the spool was written %d bytes at once, more than a chunk (%d)", ds.largest, 64<<10)
	}
	if failed := <-reports; failed {
		t.Fatal("the sender reported a failure")
	}
	// The follower's storage adopts the spooled file.
	if err := ds.disk.ApplySnapshot(got.Snapshot); err != nil {
		t.Fatal(err)
	}
	noFilesBut(t, dir, snapshot.FileName(100, 4))
}

// sameStream compares two readers chunk by chunk.
func sameStream(t *testing.T, a, b io.Reader) bool {
	t.Helper()
	ba, bb := make([]byte, 32<<10), make([]byte, 32<<10)
	for {
		na, erra := io.ReadFull(a, ba)
		nb, errb := io.ReadFull(b, bb)
		if !bytes.Equal(ba[:na], bb[:nb]) {
			return false
		}
		if erra != nil || errb != nil {
			return (erra == io.EOF || erra == io.ErrUnexpectedEOF) && (errb == io.EOF || errb == io.ErrUnexpectedEOF)
		}
	}
}

// A sender whose file turns out damaged at the end stops before the last
// chunk: the receiver never takes the snapshot, and its spool is removed.
func TestDamagedSourceIsNotDelivered(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node2")
	ds := newDiskSpool(t, dir)
	reports := make(chan bool, 4)
	a, b := startPair(t, func(c *Config) {
		c.SnapshotChunkBytes = 4 << 10
		c.SnapshotDone = func(_ uint64, failed bool) { reports <- failed }
		if c.ID == 2 {
			c.SpoolSnapshot = ds.spool
		}
	})
	waitConnected(t, a, 2)
	a.Send([]raft.Message{snapshotMessage(100<<10, true)})
	if failed := <-reports; !failed {
		t.Fatal("the sender reported success for a damaged snapshot")
	}
	ds.waitAborted(t)
	noFilesBut(t, dir)
	if b.in.len() != 0 {
		t.Fatal("a damaged snapshot was delivered")
	}
}

// Torn, corrupt, oversize and over-the-bound streams from a peer: the
// connection is closed, the spool aborted and its file removed, nothing
// delivered. A stale snapshot is read and dropped, and the connection
// goes on.
func TestBadSnapshotStreamsLeaveNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node1")
	ds := newDiskSpool(t, dir)
	if err := ds.disk.Save(raft.HardState{Term: 1, Commit: 5}, []raft.Entry{{Term: 1, Index: 1}, {Term: 1, Index: 2},
		{Term: 1, Index: 3}, {Term: 1, Index: 4}, {Term: 1, Index: 5}}, true); err != nil {
		t.Fatal(err)
	}
	l := listen(t)
	a := start(t, 1, l, map[uint64]string{2: "127.0.0.1:1"}, func(c *Config) {
		c.SpoolSnapshot = ds.spool
		c.MaxSnapshotBytes = 1 << 20
	})
	begin := func(index uint64, size int64) []byte {
		m := raft.Message{Type: raft.MsgSnapshotRequest, From: 2, To: 1, Term: 2,
			Snapshot: raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: index, Term: 2}}}
		return appendFrame(nil, frameSnapshotBegin, marshalSnapshotBegin(m, size))
	}
	chunk := func(last byte, n int) []byte {
		return appendFrame(nil, frameSnapshotChunk, append([]byte{last}, bytes.Repeat([]byte{'x'}, n)...))
	}
	connect := func() net.Conn {
		c := rawHello(t, l.Addr().String(), hello{Version: ProtocolVersion, From: 2, To: 1})
		if _, _, err := readFrame(c, 4096); err != nil {
			t.Fatalf("no hello ack: %v", err)
		}
		return c
	}
	cases := []struct {
		name   string
		frames [][]byte
		reason string
	}{
		{"torn", [][]byte{begin(50, 3000), chunk(0, 1000)}, ""},
		{"corrupt", [][]byte{begin(50, 3000), chunk(0, 1000), flipLast(chunk(0, 1000))}, "checksum mismatch"},
		{"oversize", [][]byte{begin(50, 1000), chunk(0, 1500)}, "past the 1000 bytes announced"},
		{"ends short", [][]byte{begin(50, 2000), chunk(1, 1000)}, "ended at 1000 of 2000 bytes"},
		{"bad flag", [][]byte{begin(50, 2000), chunk(7, 1000)}, "flag byte"},
	}
	for _, tc := range cases {
		c := connect()
		for _, f := range tc.frames {
			if _, err := c.Write(f); err != nil {
				t.Fatal(err)
			}
		}
		if tc.reason == "" {
			c.Close() // torn: the peer goes away mid-stream
		} else {
			expectClosed(t, c)
			a.log.waitFor(t, tc.reason)
		}
		ds.waitAborted(t)
		noFilesBut(t, dir)
	}
	// Over the configured bound: refused on the first frame.
	c := connect()
	c.Write(begin(50, 2<<20))
	expectClosed(t, c)
	a.log.waitFor(t, "over limit 1048576")

	// Stale (at the commit index): dropped, and the connection stays up.
	c = connect()
	c.Write(begin(5, 100))
	c.Write(chunk(1, 100))
	hb := raft.Message{Type: raft.MsgHeartbeatRequest, From: 2, To: 1, Term: 2}
	c.Write(appendFrame(nil, frameMessage, marshalMessage(hb)))
	got := a.in.waitFor(t, 1)
	if len(got) != 1 || got[0].Type != raft.MsgHeartbeatRequest {
		t.Fatalf("delivered %v, want only the heartbeat after the stale snapshot", got)
	}
	c.Close()
	noFilesBut(t, dir)
	if first, _ := ds.disk.FirstIndex(); first != 1 {
		t.Fatalf("the follower's log moved: FirstIndex %d", first)
	}
}

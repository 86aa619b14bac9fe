package sim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	shell "coord/node"
	"coord/raft"
)

// Snapshots are taken in the background, as on the server: the handler
// takes the machine's view at applied index i on the node's step, and the
// simulator writes it out at a later event (one to four ticks on, chosen
// by the seed), while the node goes on applying; then the handler compacts
// the log. With Config.Disk the view streams to raftstore's WriteSnapshot
// and CompactTo; on a MemoryStorage the handler encodes it into a buffer
// and compacts with it. The checker then reads the snapshot back from the
// storage, restores it into a fresh machine, and checks that it is exactly
// the state every node had at i (compacted).

// SnapshotView implements node.SnapshotViewer: the hash chain as of the
// last applied entry.
func (m *machine) SnapshotView() (io.WriterTo, error) {
	if m.viewFollows {
		return followingView{m}, nil
	}
	return bytes.NewReader(binary.BigEndian.AppendUint64(nil, m.hash)), nil
}

// PrepareRestore implements node.BackgroundRestorer: a snapshot from the
// leader is decoded at the background event, and swapped in when the
// handler takes it; the node steps messages and ticks in between, and the
// checkers see it apply nothing past the snapshot before the swap.
func (m *machine) PrepareRestore(r io.Reader, size int64) (func(), error) {
	data, err := io.ReadAll(io.LimitReader(r, size+1))
	if err != nil {
		return nil, err
	}
	if len(data) != 8 || size != 8 {
		return nil, fmt.Errorf("sim: snapshot of %d bytes (size %d), want 8", len(data), size)
	}
	hash := binary.BigEndian.Uint64(data)
	return func() { m.hash = hash; *m.restores++ }, nil
}

// followingView is a broken view: it writes the state as of when it is
// written, not when it was taken.
type followingView struct{ m *machine }

func (v followingView) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(binary.BigEndian.AppendUint64(nil, v.m.hash))
	return int64(n), err
}

// background is a node's node.Background: the work and its end run at one
// later event, unless the node crashed meanwhile.
func (s *Sim) background(n *node) shell.Background {
	return func(work func() error, finish func(error)) {
		delay := (1 + s.snapshotRng.Int64N(4)) * s.us(s.cfg.Tick)
		s.schedule(&event{at: s.now + delay, kind: eventSnapshot, node: n.id, incarnation: n.incarnation,
			work: work, finish: finish})
	}
}

// removeInBackground is a node's raftstore.Options.Background: the
// removal of the log segments a checkpoint replaced runs at a later event,
// as a background snapshot's work does, and not at all if the node crashed
// meanwhile (its next Open removes them), so that a seed replays. A dying
// node's crash point may fall in the removal, whose errors the WAL keeps
// to itself: the node crashes there, as it would in a Save (before, the
// file system stayed crashed under a node the simulator thought alive, and
// its next Save failed: seed 135 of TestDiskFaultsOnDisk).
func (s *Sim) removeInBackground(n *node) func(work func()) {
	background := s.background(n)
	return func(work func()) {
		background(func() error {
			work()
			if n.dying && n.fs.Crashed() {
				s.tracef("node %d crashes while removing log segments", n.id)
				s.crash(n)
			}
			return nil
		}, func(error) {})
	}
}

// snapshotWritten runs a background snapshot's work and its end.
func (s *Sim) snapshotWritten(e *event) {
	n := s.nodes[e.node]
	if n.h == nil || n.incarnation != e.incarnation {
		return // crashed meanwhile: the next Open removes what it left
	}
	err := e.work()
	if n.h == nil || n.incarnation != e.incarnation {
		return // crashed while writing it
	}
	e.finish(err)
	s.process(n)
}

// snapshotStorage is a node's checked storage over raftstore: it takes
// snapshots streamed in the background.
type snapshotStorage struct {
	checkedStorage
	disk shell.SnapshotStorage
}

// WriteSnapshot implements node.SnapshotStorage.
func (c snapshotStorage) WriteSnapshot(meta raft.SnapshotMetadata, data io.WriterTo) error {
	return c.judgeSnapshot("write snapshot", c.disk.WriteSnapshot(meta, data))
}

// CompactTo implements node.SnapshotStorage.
func (c snapshotStorage) CompactTo(meta raft.SnapshotMetadata) error {
	return c.judgeSnapshot("compact", c.disk.CompactTo(meta))
}

// judgeSnapshot judges a background snapshot's write: one overtaken by the
// leader's snapshot is the handler's to skip, not a failure.
func (c snapshotStorage) judgeSnapshot(op string, err error) error {
	if errors.Is(err, raft.ErrSnapshotOutOfDate) {
		return err
	}
	return c.judge(op, err)
}

// compacted checks a snapshot this node took at meta.Index: read back
// from the storage and restored into a fresh machine, it is the state
// applied at that index, with the committed entry's term.
func (c *checker) compacted(s *Sim, n *node, meta raft.SnapshotMetadata) {
	snap, err := n.storage.Snapshot()
	if err != nil {
		s.fail("snapshot", "node %d: reading back its snapshot at %d: %v", n.id, meta.Index, err)
		return
	}
	if snap.Metadata.Index != meta.Index || snap.Metadata.Term != meta.Term || !snap.Metadata.ConfState.Equal(meta.ConfState) {
		s.fail("snapshot", "node %d: took a snapshot at %d/%d, its storage holds %d/%d", n.id,
			meta.Index, meta.Term, snap.Metadata.Index, snap.Metadata.Term)
		return
	}
	data, err := readSnapshot(snap)
	if err != nil {
		s.fail("snapshot", "node %d: reading back its snapshot at %d: %v", n.id, meta.Index, err)
		return
	}
	var fresh machine
	if err := fresh.Restore(data); err != nil {
		s.fail("snapshot", "node %d: its snapshot at %d does not restore: %v", n.id, meta.Index, err)
		return
	}
	if want, ok := c.appliedAt[meta.Index]; ok && want.chain != fresh.hash {
		s.fail("snapshot", "node %d: its snapshot at %d restores a state other than the one applied there", n.id, meta.Index)
	}
	if want, ok := c.committed[meta.Index]; ok && want.term != meta.Term {
		s.fail("snapshot", "node %d: its snapshot at %d says term %d, the committed entry there has term %d",
			n.id, meta.Index, meta.Term, want.term)
	}
}

// readSnapshot returns a snapshot's data, read from its Source if it has
// one (a raftstore file), checked against its size.
func readSnapshot(snap raft.Snapshot) ([]byte, error) {
	if snap.Source == nil {
		return snap.Data, nil
	}
	r, err := snap.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, snap.Size()+1))
	if err == nil && int64(len(data)) != snap.Size() {
		err = fmt.Errorf("snapshot data of %d bytes, its source says %d", len(data), snap.Size())
	}
	return data, err
}

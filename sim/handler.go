package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	shell "coord/node"
	"coord/raft"
	"coord/storage/vfs"
)

// Each simulated node runs the production Ready handler (node.Handler):
// the simulator gives it a clock (tick), a network (transport), a storage
// that can fill up and crash (checkedStorage over raftstore on a MemFS),
// and a state machine (machine); the checkers watch it through its hooks.

// process has a node's handler do its Readies.
func (s *Sim) process(n *node) {
	if s.failure != nil || n.h == nil {
		return
	}
	err := n.h.Handle()
	switch {
	case err == nil, errors.Is(err, errCrashed):
	case errors.Is(err, shell.ErrStorage):
		s.tracef("node %d: %v; holding the Ready", n.id, err)
	default:
		s.fail("handler", "node %d: %v", n.id, err)
	}
}

// tick is one tick of a node's clock. A node whose disk is full retries
// the held Ready instead; once the disk takes it, the node goes on as if
// the write had been slow.
func (s *Sim) tick(n *node) {
	h := n.h
	held := h.Held()
	err := h.Tick()
	switch {
	case err == nil, errors.Is(err, errCrashed), errors.Is(err, shell.ErrStorage):
	default:
		s.fail("handler", "node %d: %v", n.id, err)
		return
	}
	if held && !h.Held() {
		s.stats.StuckReadies++
		s.tracef("node %d: the disk took the held Ready", n.id)
	}
	s.process(n)
}

// hooks are the checkers' view of a node's handler.
func (s *Sim) hooks(n *node) shell.Hooks {
	return shell.Hooks{
		Persisted: func(rd raft.Ready) {
			s.check.persisted(s, n, rd)
			if rd.SoftState != nil {
				s.roleChanged(n, *rd.SoftState)
			}
		},
		Applied: func(e raft.Entry) {
			n.machine.hash = chain(n.machine.hash, e)
			s.check.applied(s, n, e)
			s.forwardedApplied(n, e)
		},
		ConfChanged: func(c raft.CommittedConfChange) { s.confApplied(c.Conf, c.Index) },
		SnapshotInstalled: func(raft.SnapshotMetadata) {
			s.check.snapshotInstalled(s, n)
			// The entries the snapshot covers were never applied here:
			// the forwarded writes among them are of unknown outcome.
			n.forwarded = nil
		},
		Compacted: func(meta raft.SnapshotMetadata) {
			s.stats.Snapshots++
			s.check.compacted(s, n, meta)
		},
	}
}

func (s *Sim) roleChanged(n *node, soft raft.SoftState) {
	if n.role == raft.Leader && soft.Role != raft.Leader {
		s.leaderSteppedDown()
	}
	n.role = soft.Role
	if soft.Role == raft.Leader {
		s.stats.Leaders++
		s.tracef("node %d leads term %d", n.id, n.h.Core().Status().Term)
		s.check.becameLeader(s, n)
		s.leaderChanged(n)
	}
}

// leaderChanged counts a new leader, and the changes of leader that no
// fault explains: no fault was injected (nor a partition healed, a node
// restarted, a disk freed) within the last two maximal election timeouts
// (the effects of a fault, such as a restarted node's higher term or a
// delayed message, show within that), and no message faults are active.
// The start counts as a fault: its elections settle within that too. A
// change also counts as explained when the leaders that stopped leading
// since the last election all stopped within that window of a fault (a
// leader that lost its quorum to a full disk, say): the elections that
// follow may take longer than the window, split votes and all (seed 2120
// of coord sim --disk). In a run without faults there must be none.
func (s *Sim) leaderChanged(n *node) {
	first := s.leaderAt < 0
	s.leaderAt = s.now
	stepDowns := s.stepDowns
	s.stepDowns.any, s.stepDowns.nearFaults = false, false
	if first {
		return
	}
	s.stats.LeaderChanges++
	messageFaults := s.chaos && slices.ContainsFunc(s.cfg.Faults, func(f Fault) bool {
		return f == FaultLoss || f == FaultDelay || f == FaultReorder || f == FaultDuplicate
	})
	settle := s.settle()
	if messageFaults || s.now-settle <= s.lastFault {
		return
	}
	if stepDowns.any && stepDowns.nearFaults {
		s.tracef("node %d leads %v after the last fault; the leader before stopped leading near a fault", n.id,
			time.Duration(s.now-s.lastFault)*time.Microsecond)
		return
	}
	s.stats.UnprovokedLeaderChanges++
	s.tracef("node %d leads, though no fault happened in the last %v", n.id, time.Duration(settle)*time.Microsecond)
	if len(s.cfg.Faults) == 0 {
		s.fail("leader change without a fault", "node %d became leader at %v, and no fault was injected in the run",
			n.id, time.Duration(s.now)*time.Microsecond)
	}
}

// settle is two maximal election timeouts, in microseconds: the effects of
// a fault show within it (leaderChanged).
func (s *Sim) settle() int64 {
	return s.us(time.Duration(4*s.cfg.ElectionTicks) * s.cfg.Tick)
}

// leaderSteppedDown records that a leader stopped leading now, and whether
// a fault came within the settle window before (leaderChanged).
func (s *Sim) leaderSteppedDown() {
	nearFault := s.now-s.settle() <= s.lastFault
	s.stepDowns.nearFaults = nearFault && (s.stepDowns.nearFaults || !s.stepDowns.any)
	s.stepDowns.any = true
}

// transport is the handler's way onto the simulated network.
type transport struct{ s *Sim }

func (t transport) Send(msgs []raft.Message) {
	for _, m := range msgs {
		t.s.send(m)
	}
}

// machine is a node's state machine: a hash chain over every applied entry
// (the Applied hook extends it), which is the whole state a snapshot holds.
type machine struct {
	hash uint64
	// viewFollows: SnapshotView is broken on purpose
	// (Config.viewsFollowState).
	viewFollows bool
	// restores counts the background restores swapped in (Stats.Restores).
	restores *int
}

func (m *machine) Apply(uint64, []byte) any { return nil }

func (m *machine) Snapshot() ([]byte, error) { return binary.BigEndian.AppendUint64(nil, m.hash), nil }

func (m *machine) Restore(data []byte) error {
	if len(data) != 8 {
		return fmt.Errorf("sim: snapshot of %d bytes, want 8", len(data))
	}
	m.hash = binary.BigEndian.Uint64(data)
	return nil
}

func chain(h uint64, e raft.Entry) uint64 {
	const prime = 1099511628211
	h ^= e.Index
	h *= prime
	h ^= e.Term
	h *= prime
	h ^= uint64(e.Type)
	h *= prime
	for _, b := range e.Data {
		h ^= uint64(b)
		h *= prime
	}
	return h
}

// checkedStorage is a node's storage as its handler sees it: each write
// that fails is judged. A full disk is the handler's to survive (it holds
// the Ready, or retries the compaction later); a crash point crashes the
// node on the spot, before it sends anything; any other error is a bug.
type checkedStorage struct {
	shell.Storage
	s *Sim
	n *node
}

// Save implements node.Storage.
func (c checkedStorage) Save(hs raft.HardState, entries []raft.Entry, sync bool) error {
	return c.judge("save", c.Storage.Save(hs, entries, sync))
}

// ApplySnapshot implements node.Storage.
func (c checkedStorage) ApplySnapshot(snap raft.Snapshot) error {
	return c.judge("apply snapshot", c.Storage.ApplySnapshot(snap))
}

// Compact implements node.Storage. A snapshot taken in the background may
// be overtaken by one from the leader before it is stored: that is the
// handler's to skip, not a failure.
func (c checkedStorage) Compact(index uint64, data []byte, cs raft.ConfState) error {
	err := c.Storage.Compact(index, data, cs)
	if errors.Is(err, raft.ErrSnapshotOutOfDate) {
		return err
	}
	return c.judge("compact", err)
}

// Repair implements node.Repairer.
func (c checkedStorage) Repair() error {
	r, ok := c.Storage.(shell.Repairer)
	if !ok {
		return nil
	}
	return c.judge("repair", r.Repair())
}

func (c checkedStorage) judge(op string, err error) error {
	if err == nil || (vfs.IsNoSpace(err) && !(c.n.dying && errors.Is(err, vfs.ErrCrashed))) {
		return err
	}
	c.s.storageFailed(c.n, op, err)
	return err
}

// storageFailed handles a failed write: the crash point of a dying node
// (the node crashes mid-Ready, before sending anything), or a bug.
func (s *Sim) storageFailed(n *node, op string, err error) {
	if n.dying && errors.Is(err, vfs.ErrCrashed) {
		s.tracef("node %d crashes during %s", n.id, op)
		s.crash(n)
		return
	}
	s.fail("storage", "node %d: %s: %v", n.id, op, err)
}

// confApplied notes a committed configuration, the one at index: nodes in
// it have joined; nodes that had joined at an earlier index and are not in
// it were removed, and are retired (stopped for good). A node catching up
// applies old configurations that predate it; those say nothing.
func (s *Sim) confApplied(cs raft.ConfState, index uint64) {
	for _, id := range s.ids {
		n := s.nodes[id]
		member := cs.IsMember(id)
		switch {
		case member:
			if !n.joined || index < n.memberSince {
				n.memberSince = index
			}
			n.joined = true
		case n.joined && !n.retired && index > n.memberSince:
			n.retired = true
			s.tracef("node %d retires: removed from the cluster", id)
			s.crash(n)
		}
	}
}

package sim

import (
	"encoding/binary"
	"errors"

	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/vfs"
)

// process handles a node's Readies: persist, check, send, apply, advance.
func (s *Sim) process(n *node) {
	for s.failure == nil && n.core != nil && n.stuck == nil && n.core.HasReady() {
		st := &stuckReady{rd: n.core.Ready()}
		// 1. Persist. The storage is the durable state: whatever it
		// acknowledged survives a crash, and nothing else does.
		if op, err := s.persist(n, st); err != nil {
			if vfs.IsNoSpace(err) && !(n.dying && errors.Is(err, vfs.ErrCrashed)) {
				n.stuck = st
				s.tracef("node %d: %s on a full disk; holding the Ready", n.id, op)
				return
			}
			s.storageFailed(n, op, err)
			return
		}
		if !s.finish(n, st.rd) {
			return
		}
	}
}

// persist makes a Ready durable; it names the operation that failed.
func (s *Sim) persist(n *node, st *stuckReady) (string, error) {
	rd := st.rd
	if !rd.Snapshot.IsEmpty() && !st.snapshotDone {
		if err := n.storage.ApplySnapshot(rd.Snapshot); err != nil {
			return "apply snapshot", err
		}
		st.snapshotDone = true
	}
	if !rd.HardState.IsEmpty() || len(rd.Entries) > 0 {
		if err := n.storage.Save(rd.HardState, rd.Entries); err != nil {
			return "save", err
		}
	}
	return "", nil
}

// retryStuck repairs a stuck node's storage and writes its Ready again;
// once that works the node goes on as if the write had been slow.
func (s *Sim) retryStuck(n *node) {
	d := n.storage.(*raftstore.Disk)
	op, err := "repair", d.Repair()
	if err == nil {
		op, err = s.persist(n, n.stuck)
	}
	if err != nil {
		if !vfs.IsNoSpace(err) {
			s.storageFailed(n, op, err)
		}
		return
	}
	st := n.stuck
	n.stuck = nil
	s.stats.StuckReadies++
	s.tracef("node %d: the disk took the held Ready", n.id)
	if s.finish(n, st.rd) {
		s.process(n)
	}
}

// finish does the rest of a durable Ready: check, send, apply, advance. It
// reports false if the node is gone (retired while applying).
func (s *Sim) finish(n *node, rd raft.Ready) bool {
	core := n.core
	s.check.persisted(s, n, rd)
	if rd.SoftState != nil {
		s.roleChanged(n, *rd.SoftState)
	}
	// 2. Send, only after persisting.
	for _, m := range rd.Messages {
		s.send(m)
	}
	// 3. Apply.
	if !rd.Snapshot.IsEmpty() {
		s.applySnapshot(n, rd.Snapshot)
	}
	for _, e := range rd.CommittedEntries {
		s.apply(n, e)
	}
	for _, rs := range rd.ReadStates {
		s.readConfirmed(n, rs)
	}
	// 4. Advance, unless applying retired the node.
	if n.core != core {
		return false
	}
	core.Advance(rd)
	s.maybeSnapshot(n)
	return true
}

func (s *Sim) roleChanged(n *node, soft raft.SoftState) {
	old := n.role
	n.role = soft.Role
	if soft.Role == raft.Leader {
		s.stats.Leaders++
		s.tracef("node %d leads term %d", n.id, n.core.Status().Term)
		s.check.becameLeader(s, n)
	}
	if old == raft.Leader && soft.Role != raft.Leader {
		// Reads pending on a deposed leader are dropped by the core.
		clear(n.reads)
	}
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

func (s *Sim) apply(n *node, e raft.Entry) {
	if e.Index != n.applied+1 {
		s.fail("apply order", "node %d applied %d after %d", n.id, e.Index, n.applied)
		return
	}
	n.applied = e.Index
	n.hash = chain(n.hash, e)
	s.check.applied(s, n, e)
	switch e.Type {
	case raft.EntryConfChange:
		cc, err := raft.UnmarshalConfChange(e.Data)
		if err != nil {
			return
		}
		if cs, err := raft.ApplyConfChange(n.conf, cc); err == nil {
			n.conf = cs
			s.confApplied(cs, e.Index)
		}
	case raft.EntryNormal:
		p, ok := n.proposals[e.Index]
		if !ok {
			return
		}
		delete(n.proposals, e.Index)
		if p.term == e.Term && p.data == string(e.Data) {
			s.acked = append(s.acked, ackedWrite{index: e.Index, data: p.data})
			s.maxAcked = max(s.maxAcked, e.Index)
			s.stats.AckedWrites++
			if s.healedAt > 0 && p.at >= s.healedAt && !s.livenessMet {
				s.livenessMet = true
				s.tracef("liveness: write proposed after the faults stopped committed at %d", e.Index)
			}
		}
	}
}

func (s *Sim) applySnapshot(n *node, snap raft.Snapshot) {
	n.applied = snap.Metadata.Index
	n.hash = binary.BigEndian.Uint64(snap.Data)
	n.conf = snap.Metadata.ConfState
	s.check.snapshotInstalled(s, n)
	for i := range n.proposals {
		if i <= n.applied {
			delete(n.proposals, i) // outcome unknown to this node
		}
	}
}

func (s *Sim) maybeSnapshot(n *node) {
	if n.core == nil {
		return
	}
	// The snapshot's index is FirstIndex()-1; asking Snapshot() instead
	// would read and verify the whole snapshot file after every Ready.
	first, _ := n.storage.FirstIndex()
	if n.applied < first-1+s.cfg.SnapshotEntries {
		return
	}
	data := binary.BigEndian.AppendUint64(nil, n.hash)
	if err := n.storage.Compact(n.applied, data, n.conf); err != nil {
		if vfs.IsNoSpace(err) && !(n.dying && errors.Is(err, vfs.ErrCrashed)) {
			return // a snapshot is never fatal: tried again after the next Ready
		}
		s.storageFailed(n, "compact", err)
		return
	}
	s.stats.Snapshots++
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

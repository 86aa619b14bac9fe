package sim

import (
	"errors"
	"fmt"

	shell "coord/node"
	"coord/raft"
)

func (s *Sim) pickNode() *node {
	if s.rng.Float64() < 0.8 {
		if l := s.leader(); l != nil {
			return l
		}
	}
	return s.randomLiveNode()
}

// randomLiveNode returns a running node chosen by the seed, or nil.
func (s *Sim) randomLiveNode() *node {
	var live []*node
	for _, id := range s.ids {
		if n := s.up(id); n != nil {
			live = append(live, n)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[s.rng.IntN(len(live))]
}

// clientWrite proposes a write through a node's handler, as a client of
// the server would; the write is acknowledged when that node applies it.
func (s *Sim) clientWrite() {
	n := s.pickNode()
	if n == nil || n.h.Held() {
		return // a node with a full disk refuses writes (disk_full)
	}
	s.writeSeq++
	data := fmt.Sprintf("w%d", s.writeSeq)
	at := s.now
	switch {
	case n.role == raft.Candidate && s.limits.electionWrites:
		s.electionWrite(n, data, at)
		return
	case n.role != raft.Leader:
		s.forwardWrite(n, data, at)
		return
	}
	if err := n.h.Propose([]byte(data), func(r shell.Result) { s.writeDone(n, data, at, r) }); err != nil {
		return // not the leader, or busy: the client would retry elsewhere
	}
	s.stats.Writes++
	s.process(n)
}

// forwardWrite has a node that does not lead forward a write to its
// leader, as the server does for a client's write to a follower. The leader
// answers where it appended it, or that it refused it; the node
// acknowledges it when it applies the entry itself (forwardedApplied), and
// the handler's verdict is checked (forwardDone).
func (s *Sim) forwardWrite(n *node, data string, at int64) {
	err := n.h.Forward([]byte(data), shell.ForwardWaiter{Done: func(r shell.Result) { s.forwardDone(n, data, r) }})
	if err != nil {
		return // no leader known: the client would retry elsewhere
	}
	if n.forwarded == nil {
		n.forwarded = map[string]int64{}
	}
	n.forwarded[data] = at
	s.stats.Writes++
	s.stats.ForwardedWrites++
	s.process(n)
}

// electionWrite has a candidate hold a write until its election ends
// (ProposeAtElection), as the server does with a write that reaches a
// leader's successor in a hand-over; it is proposed if the candidate
// wins, and acknowledged when the new leader applies it. A write refused
// at once (past the held-proposal bounds), or ended with ErrNotElected,
// was appended nowhere: it must never apply, which finalChecks holds the
// cluster to.
func (s *Sim) electionWrite(n *node, data string, at int64) {
	err := n.h.ProposeAtElection([]byte(data), func(r shell.Result) {
		if errors.Is(r.Err, shell.ErrNotElected) {
			s.stats.ElectionWritesNotElected++
			s.denied = append(s.denied, deniedWrite{data: data, why: r.Err.Error()})
			return
		}
		s.writeDone(n, data, at, r)
	})
	switch {
	case errors.Is(err, shell.ErrNotElected):
		s.stats.ElectionWritesRefused++
		s.denied = append(s.denied, deniedWrite{data: data, why: err.Error()})
		return
	case err != nil:
		return // busy, or a full disk: the client would retry elsewhere
	}
	s.stats.Writes++
	s.stats.ElectionWrites++
	s.process(n)
}

// forwardDone checks what the handler says became of a forwarded write.
// Applied: the entry at the index it names holds the write. Refused by
// the leader, or lost (another entry committed at its index): the write
// must never apply anywhere, which finalChecks holds the cluster to. Any
// other end (unanswered, a snapshot, a crash) claims nothing.
func (s *Sim) forwardDone(n *node, data string, r shell.Result) {
	switch {
	case r.Err == nil:
		if fact, ok := s.check.appliedAt[r.Index]; !ok || fact.data != hashString(data) {
			s.fail("forwarded write", "node %d said forwarded write %q applied at %d, which holds other data", n.id, data, r.Index)
		}
	case errors.Is(r.Err, raft.ErrNotLeader), errors.Is(r.Err, raft.ErrProposalDropped):
		s.stats.ForwardedRefused++
		s.denied = append(s.denied, deniedWrite{data: data, why: r.Err.Error()})
	case errors.Is(r.Err, shell.ErrProposalLost):
		s.stats.ForwardedLost++
		s.denied = append(s.denied, deniedWrite{data: data, why: r.Err.Error()})
	case errors.Is(r.Err, raft.ErrForwardUnanswered):
		s.stats.ForwardedUnanswered++
	}
}

// forwardedApplied acknowledges a write node n forwarded, once n applies
// its entry. The network may duplicate the request, and the leader then
// appends it twice: only the first is an acknowledgement.
func (s *Sim) forwardedApplied(n *node, e raft.Entry) {
	if len(n.forwarded) == 0 || e.Type != raft.EntryNormal {
		return
	}
	data := string(e.Data)
	at, ok := n.forwarded[data]
	if !ok {
		return
	}
	delete(n.forwarded, data)
	s.stats.ForwardedAcked++
	s.writeDone(n, data, at, shell.Result{Index: e.Index})
}

// writeDone records an acknowledged write: the history the final checks
// hold the cluster to. A write lost to a leadership change, or of unknown
// outcome, is not acknowledged.
func (s *Sim) writeDone(n *node, data string, at int64, r shell.Result) {
	if r.Err != nil {
		return
	}
	// The Applied hook has checked this node's entry against what the
	// cluster applied at its index.
	if fact := s.check.appliedAt[r.Index]; fact.data != hashString(data) {
		s.fail("proposal", "node %d answered write %q with entry %d, which holds other data", n.id, data, r.Index)
		return
	}
	s.acked = append(s.acked, ackedWrite{index: r.Index, data: data})
	s.maxAcked = max(s.maxAcked, r.Index)
	s.stats.AckedWrites++
	if s.healedAt > 0 && at >= s.healedAt && !s.livenessMet {
		s.livenessMet = true
		s.tracef("liveness: write proposed after the faults stopped committed at %d", r.Index)
	}
}

// clientRead starts a linearizable read: half of them on a node that
// believes it leads, the others on any live node, which, if it follows
// someone, asks that leader for the read index (MsgReadIndexRequest).
func (s *Sim) clientRead() {
	// Reads go to any node that believes it leads, stale leaders
	// included, and to followers, those of a stale leader included:
	// those are the reads ReadIndex must get right.
	var leaders []*node
	for _, id := range s.ids {
		if n := s.up(id); n != nil && n.role == raft.Leader {
			leaders = append(leaders, n)
		}
	}
	n := s.randomLiveNode()
	if len(leaders) > 0 && s.rng.IntN(2) == 0 {
		n = leaders[s.rng.IntN(len(leaders))]
	}
	if n == nil || n.h.Held() {
		return
	}
	s.readSeq++
	id, minIndex := s.readSeq, s.maxAcked
	if err := n.h.ReadIndex(id, func(r shell.Result) { s.readDone(n, id, minIndex, r) }); err != nil {
		return
	}
	s.process(n)
}

// readDone checks a read the node served, on a leader or a follower: every
// write acknowledged before the read began must be at or below the read
// index, and the node's state machine, as it stands when it serves the
// read, must have applied through both, and be the state the cluster
// reached at that index; or the read could miss a write (linearizability,
// dissertation §6.4).
func (s *Sim) readDone(n *node, id, minIndex uint64, r shell.Result) {
	if r.Err != nil {
		return // the leader was deposed or changed: the client would retry
	}
	role := "leader"
	if n.role != raft.Leader {
		role = "follower"
	}
	if r.Index < minIndex {
		s.fail("linearizable read", "node %d (%s) confirmed read %d at index %d, but a write at %d was acknowledged before it began",
			n.id, role, id, r.Index, minIndex)
		return
	}
	applied := n.h.Applied()
	if applied < r.Index {
		s.fail("linearizable read", "node %d (%s) served read %d with its state applied through %d, below the read index %d",
			n.id, role, id, applied, r.Index)
		return
	}
	if fact, ok := s.check.appliedAt[applied]; ok && fact.chain != n.machine.hash {
		s.fail("linearizable read", "node %d (%s) served read %d from a state that is not the cluster's at %d", n.id, role, id, applied)
		return
	}
	s.stats.Reads++
	if n.role != raft.Leader {
		s.stats.FollowerReads++
	}
}

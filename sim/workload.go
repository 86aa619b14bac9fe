package sim

import (
	"fmt"

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

func (s *Sim) clientWrite() {
	n := s.pickNode()
	if n == nil || n.stuck != nil {
		return // a node with a full disk refuses writes (disk_full)
	}
	s.writeSeq++
	data := fmt.Sprintf("w%d", s.writeSeq)
	index, term, err := n.core.Propose([]byte(data))
	if err != nil {
		return // not the leader, or busy: the client would retry elsewhere
	}
	s.stats.Writes++
	n.proposals[index] = proposal{term: term, data: data, at: s.now}
	s.process(n)
}

func (s *Sim) clientRead() {
	// Reads go to any node that believes it leads, stale leaders
	// included: those are the reads ReadIndex must get right.
	var leaders []*node
	for _, id := range s.ids {
		if n := s.up(id); n != nil && n.role == raft.Leader {
			leaders = append(leaders, n)
		}
	}
	n := s.pickNode()
	if len(leaders) > 0 {
		n = leaders[s.rng.IntN(len(leaders))]
	}
	if n == nil || n.stuck != nil {
		return
	}
	s.readSeq++
	if err := n.core.ReadIndex(s.readSeq); err != nil {
		return
	}
	n.reads[s.readSeq] = readRequest{minIndex: s.maxAcked}
	s.process(n)
}

// readConfirmed checks a ReadIndex result: every write acknowledged before
// the read began must be at or below the read index, or the read could
// miss it (linearizability, dissertation §6.4).
func (s *Sim) readConfirmed(n *node, rs raft.ReadState) {
	req, ok := n.reads[rs.ID]
	if !ok {
		return
	}
	delete(n.reads, rs.ID)
	if rs.Index < req.minIndex {
		s.fail("linearizable read", "node %d confirmed read %d at index %d, but a write at %d was acknowledged before it began",
			n.id, rs.ID, rs.Index, req.minIndex)
		return
	}
	s.stats.Reads++
}

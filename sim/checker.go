package sim

import (
	"errors"

	"coord/raft"
)

// checker holds what the whole run has observed, and fails the run the
// moment an observation contradicts Raft's safety properties (Raft §5.4,
// Figure 3).
type checker struct {
	leaders   map[uint64]uint64       // term → the node that led it
	votes     map[[2]uint64]uint64    // (node, term) → durable vote
	grants    map[[2]uint64]uint64    // (voter, term) → candidate granted
	entries   map[[2]uint64]entryFact // (index, term) → what the entry is
	committed map[uint64]commitFact   // index → the committed entry
	appliedAt map[uint64]appliedFact  // index → what was applied there
	terms     map[uint64]uint64       // node → durable term
	commits   map[uint64]uint64       // node → durable commit index checked
	maxCommit uint64
	// written and synced are each node's commit index as last saved, and
	// as last made durable by a synced Save (a Ready that MustSync): a
	// crash may take a node back to any commit index between the two,
	// never below synced (storage.Save's contract).
	written, synced map[uint64]uint64
}

type entryFact struct {
	data     uint64 // hash of type and data
	prevTerm uint64 // term of the entry before; 0 if unknown (compacted)
}

type commitFact struct {
	term uint64 // the entry's
	// in is the lowest term of a node seen to commit the entry: the term
	// it was committed in (usually, as its leader commits first), or a
	// later one, never an earlier one.
	in uint64
}

type appliedFact struct {
	term  uint64
	data  uint64 // hash of the data
	chain uint64 // hash of the whole applied prefix
}

func newChecker() checker {
	return checker{
		leaders:   map[uint64]uint64{},
		votes:     map[[2]uint64]uint64{},
		grants:    map[[2]uint64]uint64{},
		entries:   map[[2]uint64]entryFact{},
		committed: map[uint64]commitFact{},
		appliedAt: map[uint64]appliedFact{},
		terms:     map[uint64]uint64{},
		commits:   map[uint64]uint64{},
		written:   map[uint64]uint64{},
		synced:    map[uint64]uint64{},
	}
}

func hashBytes(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

func hashString(s string) uint64 { return hashBytes([]byte(s)) }

// restarted is called when a node starts from its storage. A crash may
// lose a commit index saved without sync (Ready.MustSync false), and
// nothing else: not the term, not the vote cast in it, not a commit index
// a synced Save covered.
func (c *checker) restarted(s *Sim, n *node) {
	hs, _, _ := n.storage.InitialState()
	if hs.Term < c.terms[n.id] {
		s.fail("durable term", "node %d restarted at term %d after persisting term %d", n.id, hs.Term, c.terms[n.id])
		return
	}
	if vote := c.votes[[2]uint64{n.id, hs.Term}]; vote != 0 && hs.Vote != vote {
		s.fail("durable vote", "node %d restarted in term %d with vote %d after persisting its vote for %d", n.id, hs.Term, hs.Vote, vote)
		return
	}
	if hs.Commit < c.synced[n.id] {
		s.fail("durable commit", "node %d restarted with commit %d after a synced save of commit %d", n.id, hs.Commit, c.synced[n.id])
		return
	}
	if hs.Commit < c.written[n.id] {
		s.stats.CommitsLost++
		s.tracef("node %d restarted with commit %d; commit %d was saved without sync and lost", n.id, hs.Commit, c.written[n.id])
	}
	c.written[n.id], c.synced[n.id] = hs.Commit, hs.Commit
}

// sent checks messages as they leave. A node grants at most one vote per
// term (Figure 2, RequestVote), even across crashes. And a message leaves
// only once what it vouches for is durable (Figure 2: "respond to RPCs
// after updating stable storage"): a granted vote is in the sender's hard
// state, an acknowledged index in its log; the handler's order of work is
// what makes it so. A leader's appends may leave before its own write of
// their entries (dissertation §10.2.1), but never before the term they
// carry is durable: a leader that forgot its term could lead it again
// with other entries at the same indexes.
func (c *checker) sent(s *Sim, m raft.Message) {
	switch {
	case m.Type == raft.MsgAppendRequest || m.Type == raft.MsgHeartbeatRequest ||
		m.Type == raft.MsgSnapshotRequest || m.Type == raft.MsgTimeoutNow:
		if hs, _, err := s.nodes[m.From].storage.InitialState(); err != nil || hs.Term != m.Term {
			s.fail("durable before sent", "node %d sends %v of term %d with hard state %+v stored (%v)", m.From, m.Type, m.Term, hs, err)
		}
	case m.Type == raft.MsgAppendResponse && !m.Reject:
		if last, err := s.nodes[m.From].storage.LastIndex(); err != nil || last < m.LogIndex {
			s.fail("durable before sent", "node %d acknowledges index %d with its log ending at %d (%v)", m.From, m.LogIndex, last, err)
		}
	case m.Type == raft.MsgVoteResponse && !m.Reject:
		if hs, _, err := s.nodes[m.From].storage.InitialState(); err != nil || hs.Term != m.Term || hs.Vote != m.To {
			s.fail("durable before sent", "node %d grants its term-%d vote to %d with hard state %+v stored (%v)", m.From, m.Term, m.To, hs, err)
			return
		}
		key := [2]uint64{m.From, m.Term}
		if prev, ok := c.grants[key]; ok && prev != m.To {
			s.fail("one vote per term", "node %d granted its term-%d vote to %d and then to %d", m.From, m.Term, prev, m.To)
			return
		}
		c.grants[key] = m.To
	}
}

// persisted checks what a Ready just wrote to storage.
func (c *checker) persisted(s *Sim, n *node, rd raft.Ready) {
	if hs := rd.HardState; !hs.IsEmpty() {
		if hs.Term < c.terms[n.id] {
			s.fail("durable term", "node %d persisted term %d after term %d", n.id, hs.Term, c.terms[n.id])
			return
		}
		c.terms[n.id] = hs.Term
		c.written[n.id] = hs.Commit
		if hs.Vote != 0 {
			key := [2]uint64{n.id, hs.Term}
			if prev := c.votes[key]; prev != 0 && prev != hs.Vote {
				s.fail("one vote per term", "node %d persisted votes for %d and %d in term %d", n.id, prev, hs.Vote, hs.Term)
				return
			}
			c.votes[key] = hs.Vote
		}
	}
	if rd.MustSync {
		c.synced[n.id] = c.written[n.id]
	}
	c.logMatching(s, n, rd.Entries)
	c.commitAdvanced(s, n)
}

// logMatching checks the Log Matching property incrementally: an (index,
// term) pair names one entry with one predecessor term, everywhere. By
// induction, logs that share an entry share the whole prefix.
func (c *checker) logMatching(s *Sim, n *node, entries []raft.Entry) {
	for i, e := range entries {
		var prev uint64
		if i > 0 {
			prev = entries[i-1].Term
		} else if t, err := n.storage.Term(e.Index - 1); err == nil {
			prev = t
		}
		fact := entryFact{data: hashBytes(e.Data) ^ uint64(e.Type)<<56, prevTerm: prev}
		key := [2]uint64{e.Index, e.Term}
		old, ok := c.entries[key]
		if !ok {
			c.entries[key] = fact
			continue
		}
		if old.data != fact.data || (old.prevTerm != 0 && fact.prevTerm != 0 && old.prevTerm != fact.prevTerm) {
			s.fail("log matching", "node %d holds a different entry %d/%d (previous term %d) than seen before (previous term %d)",
				n.id, e.Index, e.Term, fact.prevTerm, old.prevTerm)
			return
		}
		if old.prevTerm == 0 {
			c.entries[key] = fact
		}
	}
}

// commitAdvanced records newly committed entries; a committed index must
// never change its term (committed entries are never lost).
func (c *checker) commitAdvanced(s *Sim, n *node) {
	hs, _, _ := n.storage.InitialState()
	commit := hs.Commit
	for i := c.commits[n.id] + 1; i <= commit; i++ {
		t, err := n.storage.Term(i)
		if errors.Is(err, raft.ErrCompacted) {
			continue
		}
		if err != nil {
			s.fail("commit", "node %d committed %d but cannot read its term: %v", n.id, i, err)
			return
		}
		old, ok := c.committed[i]
		if ok && old.term != t {
			s.fail("committed entry changed", "index %d was committed with term %d, node %d commits term %d", i, old.term, n.id, t)
			return
		}
		if !ok || hs.Term < old.in {
			c.committed[i] = commitFact{term: t, in: hs.Term}
		}
	}
	c.commits[n.id] = max(c.commits[n.id], commit)
	c.maxCommit = max(c.maxCommit, commit)
}

// becameLeader checks Election Safety (one leader per term) and Leader
// Completeness: the leader holds every entry committed in an earlier term
// (Raft §5.4.1). An entry committed in its own term or a later one it may
// lack: a node can win an election, hold the Ready that says so while its
// disk is full, and only then be seen leading, after a leader of a later
// term committed more (seed 861 on disk).
func (c *checker) becameLeader(s *Sim, n *node) {
	term := n.h.Core().Status().Term
	if prev, ok := c.leaders[term]; ok && prev != n.id {
		s.fail("one leader per term", "nodes %d and %d both led term %d", prev, n.id, term)
		return
	}
	c.leaders[term] = n.id
	first, _ := n.storage.FirstIndex()
	for i := first; i <= c.maxCommit; i++ {
		want, ok := c.committed[i]
		if !ok || want.in >= term {
			continue
		}
		got, err := n.storage.Term(i)
		if err != nil || got != want.term {
			s.fail("leader completeness", "node %d leads term %d without committed entry %d/%d (has term %d, %v)",
				n.id, term, i, want.term, got, err)
			return
		}
	}
}

// applied checks State Machine Safety: every node applies the same entry
// at each index, after the same prefix.
func (c *checker) applied(s *Sim, n *node, e raft.Entry) {
	fact := appliedFact{term: e.Term, data: hashBytes(e.Data), chain: n.machine.hash}
	if old, ok := c.appliedAt[e.Index]; ok {
		if old != fact {
			s.fail("state machine safety", "node %d applied %d/%d, another node applied %d/%d there (or a different prefix)",
				n.id, e.Index, e.Term, e.Index, old.term)
		}
		return
	}
	c.appliedAt[e.Index] = fact
}

// snapshotInstalled checks that an installed snapshot is the state other
// nodes reached at that index.
func (c *checker) snapshotInstalled(s *Sim, n *node) {
	old, ok := c.appliedAt[n.h.Applied()]
	if ok && old.chain != n.machine.hash {
		s.fail("state machine safety", "node %d installed a snapshot at %d whose state differs from what was applied there", n.id, n.h.Applied())
	}
}

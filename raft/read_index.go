package raft

// readIndex tracks linearizable reads on a leader (dissertation §6.4). A
// read records the commit index when it arrives; it may be served once a
// quorum confirms, by answering a heartbeat sent after it, that this node
// still leads. Heartbeats carry a round number that only grows; a voter's
// acknowledgement of round n confirms every read of round n or earlier.
type readIndex struct {
	round         uint64            // last round broadcast
	acks          map[uint64]uint64 // highest round each voter answered
	pending       []pendingRead     // in round order
	waiting       []uint64          // reads before the first commit of the term
	needHeartbeat bool
}

type pendingRead struct {
	id, index, round uint64
}

func (ri *readIndex) reset() { *ri = readIndex{} }

// ReadIndex asks for a linearizable read (dissertation §6.4). On the leader
// it returns nil and, once the read is safe, a ReadState with this id comes
// out of a Ready; the application serves the read after applying through
// ReadState.Index. Elsewhere it returns ErrNotLeader. Reads that are pending
// when the node loses leadership are dropped; the caller retries.
func (r *Core) ReadIndex(id uint64) error {
	if r.role != Leader {
		return ErrNotLeader
	}
	// The leader knows the commit index only after committing an entry of
	// its own term (§6.4 step 1).
	if r.log.termOrZero(r.log.committed) != r.term {
		r.reads.waiting = append(r.reads.waiting, id)
		return nil
	}
	r.startRead(id)
	return nil
}

// startRead queues a read for the next heartbeat round. The leader
// acknowledges each round itself as it starts it (flush), so a single voter
// confirms its reads at once.
func (r *Core) startRead(id uint64) {
	r.reads.pending = append(r.reads.pending, pendingRead{id: id, index: r.log.committed, round: r.reads.round + 1})
	r.reads.needHeartbeat = true
}

// ackRead records that voter id answered heartbeat round, and releases the
// reads that a quorum has now confirmed.
func (r *Core) ackRead(id, round uint64) {
	if r.reads.acks == nil {
		r.reads.acks = map[uint64]uint64{}
	}
	r.reads.acks[id] = max(r.reads.acks[id], round)
	confirmed := r.voters.CommittedIndex(func(v uint64) uint64 { return r.reads.acks[v] })
	n := 0
	for n < len(r.reads.pending) && r.reads.pending[n].round <= confirmed {
		p := r.reads.pending[n]
		r.readStates = append(r.readStates, ReadState{ID: p.id, Index: p.index})
		n++
	}
	r.reads.pending = r.reads.pending[n:]
}

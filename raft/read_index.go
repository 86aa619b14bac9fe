package raft

import "fmt"

// readIndex tracks linearizable reads (dissertation §6.4).
//
// On a leader: a read records the commit index when it arrives; it may be
// served once a quorum confirms, by answering a heartbeat sent after it,
// that this node still leads. Heartbeats carry a round number that only
// grows; a voter's acknowledgement of round n confirms every read of round
// n or earlier. A read is the leader's own (from 0) or a follower's
// request (from the follower, id its request number), which is answered
// with a MsgReadIndexResponse instead of a ReadState.
//
// On a follower: reads are batched into one MsgReadIndexRequest per Ready
// to the leader, numbered by requested, which only grows for the life of
// the core (never reset): a response of round n confirms exactly the reads
// asked in requests up to n, and a late response from before a drop finds
// none of the reads asked since. The numbers start at a random point
// (firstRequest), drawn from Config.Rand when the core first forwards a
// read, so that an answer to a request of an earlier run of this node,
// delayed in the network across a restart, falls outside this run's range
// [firstRequest, requested] and is ignored; it could match only if the two
// runs' ranges overlapped, which for 2^62 starting points and any real
// number of requests does not happen.
type readIndex struct {
	round         uint64            // last round broadcast (leader)
	acks          map[uint64]uint64 // highest round each voter answered
	pending       []pendingRead     // in round order
	waiting       []readRequest     // reads before the first commit of the term
	needHeartbeat bool

	firstRequest uint64          // this run's first request number; 0 until drawn
	requested    uint64          // last request number sent (follower); never reset
	forwarded    []forwardedRead // in request order
	needRequest  bool
}

type pendingRead struct {
	readRequest
	index, round uint64
}

// readRequest is a read on a leader: its own (from 0, under the caller's
// id) or a follower's request (from, and the request number as id).
type readRequest struct {
	from, id uint64
}

// forwardedRead is a follower's read waiting for the leader's answer to
// request number request (0 while not yet sent).
type forwardedRead struct {
	id, request uint64
}

// reset forgets every read. It returns the IDs of this node's own reads
// that will now never be confirmed, and the followers' requests a leader
// held, which the caller must refuse: their followers would otherwise wait
// for an answer that never comes. The follower's request number stays.
func (ri *readIndex) reset() (dropped []uint64, refused []readRequest) {
	for _, p := range ri.pending {
		if p.from == 0 {
			dropped = append(dropped, p.id)
		} else {
			refused = append(refused, p.readRequest)
		}
	}
	for _, w := range ri.waiting {
		if w.from == 0 {
			dropped = append(dropped, w.id)
		} else {
			refused = append(refused, w)
		}
	}
	for _, f := range ri.forwarded {
		dropped = append(dropped, f.id)
	}
	*ri = readIndex{firstRequest: ri.firstRequest, requested: ri.requested}
	return dropped, refused
}

// dropReads forgets every read (readIndex.reset): this node's own come out
// in Ready.DroppedReads, and the followers' requests a deposed leader held
// are refused, in its new term, so that each follower fails its reads at
// once (its caller retries on the leader) rather than when it learns of
// the new term some other way.
func (r *Core) dropReads() {
	dropped, refused := r.reads.reset()
	r.droppedReads = append(r.droppedReads, dropped...)
	for _, req := range refused {
		r.send(Message{Type: MsgReadIndexResponse, To: req.from, ReadRound: req.id, Reject: true})
	}
}

// ReadIndex asks for a linearizable read (dissertation §6.4). It returns
// nil and, once the read is safe, a ReadState with this id comes out of a
// Ready; the application serves the read after applying through
// ReadState.Index. On the leader the read is confirmed by a heartbeat
// round; on a follower that knows its leader, the leader is asked for a
// read index (MsgReadIndexRequest) and its answer is the ReadState.
// Elsewhere (no known leader, a candidate, a log that lost entries) it
// returns ErrNotLeader. Reads pending when the node's leader or term
// changes, or that the leader refuses, are dropped: their IDs come out in
// Ready.DroppedReads, and the caller retries.
func (r *Core) ReadIndex(id uint64) error {
	switch {
	case r.role == Leader:
		r.readFor(readRequest{id: id})
		return nil
	case r.role == Follower && r.lead != 0 && r.logLost == nil:
		r.reads.forwarded = append(r.reads.forwarded, forwardedRead{id: id})
		r.reads.needRequest = true
		return nil
	case r.logLost != nil:
		return fmt.Errorf("%w: node %d lost log entries and cannot apply a read index", ErrNotLeader, r.id)
	}
	return fmt.Errorf("%w: node %d is %v, leader unknown", ErrNotLeader, r.id, r.role)
}

// readFor starts a leader's read. The leader knows the commit index only
// after committing an entry of its own term (§6.4 step 1); reads before
// that wait for it.
func (r *Core) readFor(req readRequest) {
	if r.log.termOrZero(r.log.committed) != r.term {
		r.reads.waiting = append(r.reads.waiting, req)
		return
	}
	r.startRead(req)
}

// startRead queues a read for the next heartbeat round. The leader
// acknowledges each round itself as it starts it (flush), so a single voter
// confirms its reads at once.
func (r *Core) startRead(req readRequest) {
	r.reads.pending = append(r.reads.pending, pendingRead{readRequest: req, index: r.log.committed, round: r.reads.round + 1})
	r.reads.needHeartbeat = true
}

// ackRead records that voter id answered heartbeat round, and releases the
// reads that a quorum has now confirmed: the leader's own as ReadStates,
// a follower's as a MsgReadIndexResponse.
func (r *Core) ackRead(id, round uint64) {
	if r.reads.acks == nil {
		r.reads.acks = map[uint64]uint64{}
	}
	r.reads.acks[id] = max(r.reads.acks[id], round)
	confirmed := r.voters.CommittedIndex(func(v uint64) uint64 { return r.reads.acks[v] })
	n := 0
	for n < len(r.reads.pending) && r.reads.pending[n].round <= confirmed {
		p := r.reads.pending[n]
		if p.from == 0 {
			r.readStates = append(r.readStates, ReadState{ID: p.id, Index: p.index})
		} else {
			r.send(Message{Type: MsgReadIndexResponse, To: p.from, LogIndex: p.index, ReadRound: p.id})
		}
		n++
	}
	r.reads.pending = r.reads.pending[n:]
}

// sendReadRequest sends, on a follower, one request for the reads asked
// since the last one.
func (r *Core) sendReadRequest() {
	r.reads.needRequest = false
	if r.role != Follower || r.lead == 0 {
		return
	}
	request := r.nextRequest()
	for i := range r.reads.forwarded {
		if r.reads.forwarded[i].request == 0 {
			r.reads.forwarded[i].request = request
		}
	}
	r.send(Message{Type: MsgReadIndexRequest, To: r.lead, ReadRound: request})
}

// handleReadIndexResponse takes the leader's answer to request m.ReadRound
// on a follower: it confirms, at m.LogIndex, the reads asked in that request
// and earlier ones (the leader answers in order, and a later index serves an
// earlier read as well: it is at or above the commit index when that read
// began); a refusal drops them.
func (r *Core) handleReadIndexResponse(m Message) {
	if m.From != r.lead || m.ReadRound < r.reads.firstRequest || m.ReadRound > r.reads.requested {
		// A late answer from a leader this node no longer follows, or to a
		// request of an earlier run of this node.
		return
	}
	n := 0
	for n < len(r.reads.forwarded) && r.reads.forwarded[n].request != 0 && r.reads.forwarded[n].request <= m.ReadRound {
		id := r.reads.forwarded[n].id
		if m.Reject {
			r.droppedReads = append(r.droppedReads, id)
		} else {
			r.readStates = append(r.readStates, ReadState{ID: id, Index: m.LogIndex})
		}
		n++
	}
	r.reads.forwarded = r.reads.forwarded[n:]
}

// checkReadIndexMessage refuses a read index request or response that no
// correct peer sends: fields other than the ones the type uses set, a
// request numbered 0, a confirmation at index 0 (a leader's read index is at least its first
// entry of the term) or a refusal carrying an index.
func (r *Core) checkReadIndexMessage(m Message) error {
	unused := m.LogTerm != 0 || m.Commit != 0 || m.HintIndex != 0 || m.HintTerm != 0 || m.Lead != 0 || m.Transfer ||
		len(m.Entries) != 0 || !m.Snapshot.IsEmpty() || len(m.Snapshot.Data) != 0
	switch {
	case m.Type == MsgReadIndexRequest && (unused || m.LogIndex != 0 || m.Reject):
		return fmt.Errorf("%w: %v from %d sets fields a read index request does not use", ErrInvalidMessage, m.Type, m.From)
	case m.Type == MsgReadIndexResponse && unused:
		return fmt.Errorf("%w: %v from %d sets fields a read index response does not use", ErrInvalidMessage, m.Type, m.From)
	case m.ReadRound == 0:
		return fmt.Errorf("%w: %v from %d has request number 0", ErrInvalidMessage, m.Type, m.From)
	case m.Type == MsgReadIndexResponse && m.Reject != (m.LogIndex == 0):
		return fmt.Errorf("%w: %v from %d has index %d and reject %t: a refusal has no index, a confirmation has one", ErrInvalidMessage, m.Type, m.From, m.LogIndex, m.Reject)
	}
	return nil
}

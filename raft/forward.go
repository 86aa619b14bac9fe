package raft

import "fmt"

// Forwarded proposals (etcd's MsgProp, with an answer): a follower sends
// proposals to its leader in a MsgProposalRequest, and the leader answers
// each request with a MsgProposalResponse, saying where it appended the
// proposals or that it refused them. The follower learns from the answer
// what became of each proposal for certain: refused, never appended; or
// appended at (index, term), so committed if and only if the entry
// committed at that index has that term (Raft §5.3, Log Matching), which
// the follower sees in its own log even after the leader changed.
//
// Requests are numbered from the same counter as the follower's read index
// requests (readIndex.requested): a random start, then one more per
// request, so that an answer to a request of an earlier run of this node,
// delayed across a restart, matches none of this run's.
type forwarding struct {
	ticket   uint64          // the last ticket Forward gave
	ticks    uint64          // ticks seen: the clock of expiry
	inflight []forwardBatch  // requests sent and not yet answered, in order
	results  []ForwardResult // for the next Ready

	// answered holds the answers this node gave as a leader, by request,
	// at most maxAnsweredRequests (answeredOrder holds their keys in a
	// ring, the oldest at answeredNext once it is full), kept
	// whatever its role and term since: a copy of a request that arrives
	// again (a network that duplicates; the TCP transport never does, and
	// a restart, which forgets them, closes the connections) gets the same
	// answer, and is not appended a second time. Otherwise an answer could
	// be wrong: a refusal while the first copy was appended (here, before
	// this node stepped down), or the second copy's index while the first
	// copy's entry is the one that commits.
	answered      map[requestKey]requestAnswer
	answeredOrder []requestKey
	answeredNext  int
}

// requestKey names a proposal request: its sender and number.
type requestKey struct{ from, request uint64 }

// requestAnswer is how a leader answered a request: appended from index
// (not 0) in term, or refused naming lead.
type requestAnswer struct{ index, term, lead uint64 }

// maxAnsweredRequests bounds forwarding.answered.
const maxAnsweredRequests = 4096

// forwardBatch is one MsgProposalRequest waiting for its answer: count
// proposals, whose tickets run from firstTicket, sent to node to at tick
// sentTick.
type forwardBatch struct {
	request, to, firstTicket uint64
	count                    int
	sentTick                 uint64
}

// maxForwardBatches bounds the requests a follower waits for an answer to;
// past it the oldest is given up (ErrForwardUnanswered). A leader answers
// in a round trip, so only a lost connection leaves requests unanswered.
const maxForwardBatches = 4096

// ForwardResult says what became of a proposal made with Forward. One
// comes out of a Ready for each ticket Forward returned.
type ForwardResult struct {
	// Ticket is what Forward returned for the proposal.
	Ticket uint64
	// Index and Term are where the leader appended the proposal, when Err
	// is nil: it is committed if and only if the entry committed at Index
	// has Term (as for Propose).
	Index, Term uint64
	// Lead, with a refusal, is the node the refusing node takes for the
	// leader: itself when it leads but takes no proposals for now, the
	// target of a leadership transfer in progress, the leader it follows,
	// or 0 when it knows none.
	Lead uint64
	// Err is nil if the proposal was appended. It wraps ErrNotLeader or
	// ErrProposalDropped if it was refused, and then it was appended
	// nowhere; ErrForwardUnanswered if no answer came: it may or may not
	// have been appended.
	Err error
}

// Forward proposes data from whichever role this node has and returns a
// ticket for it: a leader appends it as Propose does; a follower that
// knows its leader sends it there in a MsgProposalRequest (proposals made
// between two Readies travel together), and the leader appends it as if
// proposed locally, or refuses it. Either way a ForwardResult with the
// ticket comes out of a later Ready: on a leader in the same Ready as the
// entry, on a follower once the leader answered (or, unanswered, after
// 2*ElectionTicks ticks). It fails, and no result comes, with ErrNotLeader
// if no leader is known, and, on a leader, as Propose does.
func (r *Core) Forward(data []byte) (ticket uint64, err error) {
	if len(data) == 0 {
		// An empty normal entry is the leader's no-op; a proposal
		// request never carries one (checkProposalRequest).
		return 0, fmt.Errorf("%w: empty proposal", ErrProposalDropped)
	}
	if r.role == Leader {
		index, term, err := r.Propose(data)
		if err != nil {
			return 0, err
		}
		r.forwards.ticket++
		r.forwards.results = append(r.forwards.results, ForwardResult{Ticket: r.forwards.ticket, Index: index, Term: term})
		return r.forwards.ticket, nil
	}
	if r.lead == 0 || r.role != Follower {
		return 0, fmt.Errorf("%w: node %d is %v and knows no leader to forward to", ErrNotLeader, r.id, r.role)
	}
	r.forwards.ticket++
	// Batch with the proposals already waiting for this Ready, up to an
	// append's size.
	if n, b := len(r.msgs), len(r.forwards.inflight); n > 0 && b > 0 {
		last, batch := &r.msgs[n-1], &r.forwards.inflight[b-1]
		if last.Type == MsgProposalRequest && last.To == r.lead && last.Term == r.term && last.ReadRound == batch.request &&
			entriesBytes(last.Entries)+uint64(len(data)) <= r.cfg.MaxAppendBytes {
			last.Entries = append(last.Entries, Entry{Type: EntryNormal, Data: data})
			batch.count++
			return r.forwards.ticket, nil
		}
	}
	if len(r.forwards.inflight) == maxForwardBatches {
		r.giveUpForwards(1)
	}
	request := r.nextRequest()
	r.forwards.inflight = append(r.forwards.inflight, forwardBatch{
		request: request, to: r.lead, firstTicket: r.forwards.ticket, count: 1, sentTick: r.forwards.ticks})
	r.send(Message{Type: MsgProposalRequest, To: r.lead, ReadRound: request, Entries: []Entry{{Type: EntryNormal, Data: data}}})
	return r.forwards.ticket, nil
}

// appendForwarded appends the proposals a follower forwarded as if they
// were proposed here, under Propose's checks (not a voter, a transfer in
// progress, the uncommitted-bytes limit) for the batch as a whole, and
// answers where they went, or that they were refused.
func (r *Core) appendForwarded(m Message) {
	if r.answeredBefore(m) {
		return
	}
	var a requestAnswer
	if err := r.checkProposal(entriesBytes(m.Entries)); err != nil {
		a.lead = r.id // busy: the uncommitted log is full
		switch {
		case r.leadTransferee != 0:
			a.lead = r.leadTransferee
		case !r.voters.Contains(r.id):
			a.lead = 0 // a removed leader, stepping down once that commits
		}
	} else {
		a.index, a.term = r.log.lastIndex()+1, r.term
		for _, e := range m.Entries {
			r.appendEntry(Entry{Type: EntryNormal, Data: e.Data})
		}
	}
	if r.forwards.answered == nil {
		r.forwards.answered = map[requestKey]requestAnswer{}
	}
	key := requestKey{m.From, m.ReadRound}
	r.forwards.answered[key] = a
	if f := &r.forwards; len(f.answeredOrder) < maxAnsweredRequests {
		f.answeredOrder = append(f.answeredOrder, key)
	} else {
		delete(f.answered, f.answeredOrder[f.answeredNext])
		f.answeredOrder[f.answeredNext] = key
		f.answeredNext = (f.answeredNext + 1) % maxAnsweredRequests
	}
	r.answerProposals(m, a)
}

// answeredBefore answers again, as it did, a proposal request this node
// answered as a leader, and reports whether it did.
func (r *Core) answeredBefore(m Message) bool {
	a, ok := r.forwards.answered[requestKey{m.From, m.ReadRound}]
	if ok {
		r.answerProposals(m, a)
	}
	return ok
}

// answerProposals sends a leader's answer to proposal request m. An
// acceptance names the index of the first proposal and the term it was
// appended in: another entry can take that index only in a later term (one
// leader per term, Raft §5.2), so the follower tells the outcome by the
// term it finds there once committed.
func (r *Core) answerProposals(m Message, a requestAnswer) {
	if a.index == 0 {
		r.refuseProposals(m, a.lead)
		return
	}
	r.send(Message{Type: MsgProposalResponse, To: m.From, ReadRound: m.ReadRound, LogIndex: a.index, LogTerm: a.term})
}

// refuseRequest answers a proposal request that this node, not leading
// its term, does not append: a refusal naming the leader it knows, unless
// it answered the request before, as a leader.
func (r *Core) refuseRequest(m Message) {
	if !r.answeredBefore(m) {
		r.refuseProposals(m, r.lead)
	}
}

// refuseProposals answers a proposal request this node does not append
// (it does not lead, the request is of an older term, or the leader
// refuses for now), naming the node it takes for the leader, so that the
// follower fails the proposals at once and its caller goes there.
func (r *Core) refuseProposals(m Message, lead uint64) {
	r.send(Message{Type: MsgProposalResponse, To: m.From, ReadRound: m.ReadRound, Reject: true, Lead: lead})
}

// handleProposalResponse takes, on the node that forwarded them, the
// answer to request m.ReadRound. It is a fact whatever this node's term
// now: a refusal means the proposals were appended nowhere, an acceptance
// where they were appended. An answer to no request in flight (a
// duplicate, one given up on, one to an earlier run of this node) is
// ignored.
func (r *Core) handleProposalResponse(m Message) {
	i := 0
	for i < len(r.forwards.inflight) && (r.forwards.inflight[i].request != m.ReadRound || r.forwards.inflight[i].to != m.From) {
		i++
	}
	if i == len(r.forwards.inflight) {
		return
	}
	b := r.forwards.inflight[i]
	r.forwards.inflight = append(r.forwards.inflight[:i], r.forwards.inflight[i+1:]...)
	var refusal error
	if m.Reject {
		switch {
		case m.Lead == m.From:
			refusal = fmt.Errorf("%w: leader %d refused the proposal for now (term %d)", ErrProposalDropped, m.From, m.Term)
		case m.Lead != 0:
			refusal = fmt.Errorf("%w: node %d refused the proposal: the leader is, or is about to be, node %d (term %d)", ErrNotLeader, m.From, m.Lead, m.Term)
		default:
			refusal = fmt.Errorf("%w: node %d refused the proposal: it knows no leader (term %d)", ErrNotLeader, m.From, m.Term)
		}
	}
	for k := range b.count {
		res := ForwardResult{Ticket: b.firstTicket + uint64(k)}
		if refusal != nil {
			res.Lead, res.Err = m.Lead, refusal
		} else {
			res.Index, res.Term = m.LogIndex+uint64(k), m.LogTerm
		}
		r.forwards.results = append(r.forwards.results, res)
	}
}

// tickForwards gives up on the requests unanswered for 2*ElectionTicks
// ticks: a leader answers in a round trip, so their message or its answer
// was lost with a connection, or the leader stopped.
func (r *Core) tickForwards() {
	r.forwards.ticks++
	n := 0
	for n < len(r.forwards.inflight) && r.forwards.ticks-r.forwards.inflight[n].sentTick >= 2*uint64(r.cfg.ElectionTicks) {
		n++
	}
	r.giveUpForwards(n)
}

// giveUpForwards reports the first n requests in flight unanswered.
func (r *Core) giveUpForwards(n int) {
	for _, b := range r.forwards.inflight[:n] {
		for k := range b.count {
			r.forwards.results = append(r.forwards.results, ForwardResult{Ticket: b.firstTicket + uint64(k),
				Err: fmt.Errorf("%w: request %d to node %d", ErrForwardUnanswered, b.request, b.to)})
		}
	}
	r.forwards.inflight = append(r.forwards.inflight[:0], r.forwards.inflight[n:]...)
}

// nextRequest returns the next request number of this node, for a read
// index request or a proposal request. The numbers start at a random
// point, drawn from Config.Rand when first needed (see readIndex).
func (r *Core) nextRequest() uint64 {
	if r.reads.firstRequest == 0 {
		// 62 random bits, from an interface that draws ints.
		start := uint64(r.cfg.Rand.IntN(1<<31))<<31 | uint64(r.cfg.Rand.IntN(1<<31))
		r.reads.firstRequest, r.reads.requested = start+1, start
	}
	r.reads.requested++
	return r.reads.requested
}

func entriesBytes(entries []Entry) uint64 {
	var size uint64
	for _, e := range entries {
		size += uint64(len(e.Data))
	}
	return size
}

// checkProposalRequest refuses a forwarded proposal that Forward never
// sends: no proposals, one that is not a normal entry with data and zero
// index and term, request number 0, or any field a proposal request does
// not use. A membership change in particular must never be forwarded: it
// would skip ProposeConfChange's checks.
func checkProposalRequest(m Message) error {
	if len(m.Entries) == 0 {
		return fmt.Errorf("%w: %v from %d carries no proposals", ErrInvalidMessage, m.Type, m.From)
	}
	for i, e := range m.Entries {
		if e.Type != EntryNormal || e.Index != 0 || e.Term != 0 || len(e.Data) == 0 {
			return fmt.Errorf("%w: %v from %d: proposal %d is a %v entry at %d/%d with %d bytes; want a normal entry with data and no index or term",
				ErrInvalidMessage, m.Type, m.From, i, e.Type, e.Index, e.Term, len(e.Data))
		}
	}
	if m.LogIndex != 0 || m.LogTerm != 0 || m.Commit != 0 || m.Reject || m.HintIndex != 0 || m.HintTerm != 0 ||
		m.Lead != 0 || m.Transfer || !m.Snapshot.IsEmpty() || len(m.Snapshot.Data) != 0 {
		return fmt.Errorf("%w: %v from %d sets fields a proposal request does not use", ErrInvalidMessage, m.Type, m.From)
	}
	if m.ReadRound == 0 {
		return fmt.Errorf("%w: %v from %d has request number 0", ErrInvalidMessage, m.Type, m.From)
	}
	return nil
}

// checkProposalResponse refuses an answer no correct peer sends: request
// number 0, fields an answer does not use, an acceptance without an index
// or in a term after the sender's, a refusal with an index.
func checkProposalResponse(m Message) error {
	switch {
	case m.ReadRound == 0:
		return fmt.Errorf("%w: %v from %d has request number 0", ErrInvalidMessage, m.Type, m.From)
	case m.Commit != 0 || m.HintIndex != 0 || m.HintTerm != 0 || m.Transfer || len(m.Entries) != 0 ||
		!m.Snapshot.IsEmpty() || len(m.Snapshot.Data) != 0:
		return fmt.Errorf("%w: %v from %d sets fields a proposal response does not use", ErrInvalidMessage, m.Type, m.From)
	case m.Reject && (m.LogIndex != 0 || m.LogTerm != 0):
		return fmt.Errorf("%w: %v from %d refuses at index %d/%d: a refusal has no index", ErrInvalidMessage, m.Type, m.From, m.LogIndex, m.LogTerm)
	case !m.Reject && (m.LogIndex == 0 || m.LogTerm == 0 || m.LogTerm > m.Term || m.Lead != 0):
		return fmt.Errorf("%w: %v from %d in term %d accepts at %d/%d with leader %d: an acceptance names an index and a term up to the sender's, and no leader",
			ErrInvalidMessage, m.Type, m.From, m.Term, m.LogIndex, m.LogTerm, m.Lead)
	}
	return nil
}

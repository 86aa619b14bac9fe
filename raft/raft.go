package raft

import (
	"errors"
	"fmt"
	"slices"

	"coord/internal/assert"
	"coord/raft/quorum"
)

// Core is one node's Raft state machine. Messages and ticks go in (Step,
// Tick), the work to do comes out (Ready), and Advance confirms it was done.
//
// Core is not safe for concurrent use; the node package runs it on one
// goroutine. It does no I/O and reads no clock: the same inputs give the
// same outputs, which is what lets the simulator replay a run from a seed.
type Core struct {
	id  uint64
	cfg Config
	log *raftLog

	// Persistent state (Figure 2): currentTerm and votedFor; the log is
	// in log.
	term uint64
	vote uint64

	role Role
	lead uint64

	// conf is the latest membership in the log, committed or not
	// (dissertation §4.1); confPoints records it after each membership
	// entry not yet applied, so that a truncation can roll it back and a
	// Ready can hand the committed ones to the application
	// (Ready.ConfChanges). confPoints[0] is the base: the membership as of
	// an index already applied (or the snapshot's).
	conf       ConfState
	confPoints []confPoint
	voters     quorum.Joint
	members    []uint64 // voters (both halves) and learners, sorted: the iteration order

	// Leader state (Figure 2: nextIndex[], matchIndex[]).
	progress map[uint64]*Progress
	// Candidate state: votes received in this election.
	votes map[uint64]bool

	electionElapsed           int
	heartbeatElapsed          int
	randomizedElectionTimeout int

	leadTransferee   uint64
	pendingConfIndex uint64
	uncommittedBytes uint64
	// needBroadcast batches appends: proposals between two Readies go
	// out in one AppendRequest per follower.
	needBroadcast bool

	reads      readIndex
	forwards   forwarding
	readStates []ReadState
	// droppedReads are this node's reads that will never be confirmed
	// (Ready.DroppedReads).
	droppedReads []uint64

	// logLost is set while this node's log ends below a commit index a
	// leader told it (see LogLost).
	logLost *LogLost

	// The leader-gone hint (ReportPeerGone). hintLead and hintTerm are the
	// leader and term of the last hint taken: a connection that flaps
	// gives one hint per leader per term. ignoredPreVotes holds the
	// pre-vote requests (one per sender, at most one per member) this
	// follower ignored since it last heard from its leader, because it
	// did hear from it; a hint answers them.
	hintLead, hintTerm uint64
	ignoredPreVotes    []Message

	msgs []Message

	step func(*Core, Message)
	tick func(*Core)

	prevSoft         SoftState
	prevHard         HardState
	readyOutstanding bool
}

type confPoint struct {
	index  uint64
	term   uint64
	change ConfChange
	conf   ConfState
}

// New returns a core for cfg, restored from cfg.Storage. If the storage is
// empty and cfg.Peers is set, the node bootstraps a new cluster with those
// voters.
func New(cfg Config) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log, err := newLog(cfg.Storage, cfg.MaxCommittedBytesPerReady)
	if err != nil {
		return nil, fmt.Errorf("raft: open log: %w", err)
	}
	hs, cs, err := cfg.Storage.InitialState()
	if err != nil {
		return nil, fmt.Errorf("raft: initial state: %w", err)
	}
	snap, err := cfg.Storage.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("raft: snapshot: %w", err)
	}
	r := &Core{id: cfg.ID, cfg: cfg, log: log}
	// The snapshot's membership already reflects the entries it covers;
	// replay only the membership entries after it.
	base := max(log.firstIndex()-1, snap.Metadata.Index)
	r.confPoints = []confPoint{{index: base, conf: cs}}
	if err := r.loadConfFromLog(base + 1); err != nil {
		return nil, err
	}
	if !hs.IsEmpty() {
		if hs.Commit < log.committed || hs.Commit > log.lastIndex() {
			return nil, fmt.Errorf("raft: hard state commit %d outside [%d, %d]", hs.Commit, log.committed, log.lastIndex())
		}
		r.term, r.vote = hs.Term, hs.Vote
		log.committed = hs.Commit
	}
	if cfg.Applied > 0 {
		if cfg.Applied > log.committed {
			return nil, fmt.Errorf("%w: Applied %d is beyond the commit index %d", ErrInvalidConfig, cfg.Applied, log.committed)
		}
		log.appliedTo(cfg.Applied)
	}
	r.prevHard = r.hardState()
	bootstrap := hs.IsEmpty() && log.lastIndex() == 0 && len(cs.Voters) == 0 && len(cfg.Peers) > 0
	r.becomeFollower(r.term, 0)
	r.prevSoft = r.softState()
	if bootstrap {
		r.bootstrap(cfg.Peers)
	}
	return r, nil
}

// bootstrap writes the initial membership as entry 1 of term 1, committed.
// Every initial member writes the identical entry, so log matching holds
// and any majority holds it.
func (r *Core) bootstrap(peers []uint64) {
	var cc ConfChange
	ids := slices.Clone(peers)
	slices.Sort(ids)
	for _, id := range slices.Compact(ids) {
		cc.Changes = append(cc.Changes, ConfChangeSingle{Type: ConfChangeAddVoter, NodeID: id})
	}
	r.becomeFollower(1, 0)
	r.appendToLog([]Entry{{Term: 1, Index: 1, Type: EntryConfChange, Data: cc.Marshal()}})
	r.log.commitTo(1)
}

// loadConfFromLog replays the membership entries of the stored log on top
// of the snapshot's configuration.
func (r *Core) loadConfFromLog(from uint64) error {
	const pageBytes = 1 << 20
	for lo, hi := from, r.log.lastIndex()+1; lo < hi; {
		entries, err := r.log.slice(lo, hi, pageBytes)
		if err != nil {
			return fmt.Errorf("raft: read log for membership: %w", err)
		}
		r.noteConfEntries(entries)
		lo += uint64(len(entries))
	}
	r.setConf(r.confPoints[len(r.confPoints)-1].conf)
	return nil
}

// noteConfEntries records the membership after each EntryConfChange in
// entries. An entry that does not decode or apply is a no-op on every node
// alike, because every node evaluates it against the same log prefix.
func (r *Core) noteConfEntries(entries []Entry) {
	for _, e := range entries {
		if e.Type != EntryConfChange {
			continue
		}
		cc, err := UnmarshalConfChange(e.Data)
		if err != nil {
			continue
		}
		cs, err := ApplyConfChange(r.confPoints[len(r.confPoints)-1].conf, cc)
		if err != nil {
			continue
		}
		r.confPoints = append(r.confPoints, confPoint{index: e.Index, term: e.Term, change: cc, conf: cs})
	}
}

// appendToLog appends entries (truncating any conflicting suffix) and
// updates the membership: a configuration takes effect as soon as it is in
// the log, and is rolled back if its entry is truncated (dissertation
// §4.1).
func (r *Core) appendToLog(entries []Entry) {
	if len(entries) == 0 {
		return
	}
	r.log.append(entries...)
	first := entries[0].Index
	for len(r.confPoints) > 1 && r.confPoints[len(r.confPoints)-1].index >= first {
		r.confPoints = r.confPoints[:len(r.confPoints)-1]
	}
	r.noteConfEntries(entries)
	if latest := r.confPoints[len(r.confPoints)-1].conf; !latest.Equal(r.conf) {
		r.setConf(latest)
	}
}

// setConf makes cs the configuration in force.
func (r *Core) setConf(cs ConfState) {
	r.conf = cs
	r.voters = quorum.Joint{Incoming: cs.Voters, Outgoing: cs.VotersOutgoing}
	r.members = append(r.voters.IDs(), cs.Learners...)
	slices.Sort(r.members)
	r.members = slices.Compact(r.members)
	if r.role != Leader {
		return
	}
	for _, id := range r.members {
		if r.progress[id] == nil {
			r.progress[id] = newProgress(r.log.lastIndex()+1, r.cfg.MaxInflightMsgs, r.cfg.MaxInflightBytes)
		}
	}
	for id := range r.progress {
		if !slices.Contains(r.members, id) {
			delete(r.progress, id)
		}
	}
	if r.leadTransferee != 0 && !r.conf.IsVoter(r.leadTransferee) {
		r.abortLeaderTransfer()
	}
	// A smaller quorum may commit at once.
	if r.maybeCommit() {
		r.needBroadcast = true
	}
}

func (r *Core) hardState() HardState {
	return HardState{Term: r.term, Vote: r.vote, Commit: r.log.committed}
}

func (r *Core) softState() SoftState { return SoftState{Lead: r.lead, Role: r.role} }

// promotable reports whether this node may campaign: a voter may, and so
// may a node whose removal (or demotion) is still uncommitted. Without the
// latter, a two-voter cluster whose leader removed itself and restarted
// before the change reached the other node would deadlock: the old leader,
// not a voter in its own log, would never campaign, and the other node,
// whose log is behind, could never win its vote. Such a candidate counts
// votes in its latest configuration, without itself, and leads only until
// the change commits (dissertation §4.2.2).
func (r *Core) promotable() bool {
	if r.logLost != nil {
		return false // it may lack committed entries: it must not lead
	}
	if r.voters.Contains(r.id) {
		return true
	}
	n := len(r.confPoints)
	if n < 2 || r.confPoints[n-1].index <= r.log.committed {
		return false
	}
	prev := r.confPoints[n-2].conf
	return prev.IsVoter(r.id) || slices.Contains(prev.VotersOutgoing, r.id)
}

// ---- Role transitions (a transition sets everything at once) ----

func (r *Core) reset(term uint64) {
	if r.term != term {
		r.term = term
		r.vote = 0
	}
	r.lead = 0
	r.electionElapsed = 0
	r.heartbeatElapsed = 0
	r.randomizedElectionTimeout = r.cfg.ElectionTicks + r.cfg.Rand.IntN(r.cfg.ElectionTicks)
	r.leadTransferee = 0
	r.votes = map[uint64]bool{}
	r.progress = nil
	r.pendingConfIndex = 0
	r.uncommittedBytes = 0
	r.needBroadcast = false
	r.dropReads()
	r.ignoredPreVotes = nil
}

func (r *Core) becomeFollower(term, lead uint64) {
	r.step = stepFollower
	r.tick = tickElection
	r.reset(term)
	r.lead = lead
	r.role = Follower
}

func (r *Core) becomePreCandidate() {
	if r.role == Leader {
		assert.Fail("node %d: leader cannot become pre-candidate", r.id)
	}
	// A pre-candidate keeps its term and vote: it only asks (§9.6).
	r.step = stepCandidate
	r.tick = tickElection
	r.votes = map[uint64]bool{}
	r.lead = 0
	r.role = PreCandidate
	// Reads asked of the leader it gave up on will not be answered.
	r.dropReads()
}

func (r *Core) becomeCandidate() {
	if r.role == Leader {
		assert.Fail("node %d: leader cannot become candidate", r.id)
	}
	// Increment currentTerm and vote for self (Figure 2, Candidates).
	r.step = stepCandidate
	r.tick = tickElection
	r.reset(r.term + 1)
	r.vote = r.id
	r.role = Candidate
}

func (r *Core) becomeLeader() {
	if r.role != Candidate {
		assert.Fail("node %d: only a candidate becomes leader, not a %v", r.id, r.role)
	}
	r.step = stepLeader
	r.tick = tickHeartbeat
	r.reset(r.term)
	r.lead = r.id
	r.role = Leader
	r.progress = map[uint64]*Progress{}
	last := r.log.lastIndex()
	for _, id := range r.members {
		pr := newProgress(last+1, r.cfg.MaxInflightMsgs, r.cfg.MaxInflightBytes)
		if id == r.id {
			// The leader counts towards a quorum only what it has
			// persisted (see Advance).
			pr.Match = r.log.lastStableIndex()
			pr.becomeReplicate()
			pr.RecentActive = true
		}
		r.progress[id] = pr
	}
	// Commit an entry of the new term at once: it commits everything
	// before it (Raft §5.4.2, §8) and enables ReadIndex (§6.4).
	r.appendEntry(Entry{Type: EntryNormal})
}

// ---- Elections (Raft §5.2, dissertation §9.6) ----

// hup starts an election if this node may.
func (r *Core) hup(transfer bool) {
	if r.role == Leader || !r.promotable() {
		return
	}
	r.campaign(r.cfg.PreVote && !transfer, transfer)
}

func (r *Core) campaign(pre, transfer bool) {
	var term uint64
	var kind MessageType
	if pre {
		r.becomePreCandidate()
		term, kind = r.term+1, MsgPreVoteRequest
	} else {
		r.becomeCandidate()
		term, kind = r.term, MsgVoteRequest
	}
	if r.poll(r.id, true) == quorum.VoteWon {
		// A single voter wins alone.
		if pre {
			r.campaign(false, transfer)
		} else {
			r.becomeLeader()
		}
		return
	}
	lastIndex, lastTerm := r.log.lastIndex(), r.log.lastTerm()
	for _, id := range r.voters.IDs() {
		if id == r.id {
			continue
		}
		r.send(Message{Type: kind, To: id, Term: term, LogIndex: lastIndex, LogTerm: lastTerm, Transfer: transfer})
	}
}

func (r *Core) poll(id uint64, granted bool) quorum.VoteResult {
	if _, ok := r.votes[id]; !ok {
		r.votes[id] = granted
	}
	return r.voters.VoteResult(r.votes)
}

// ---- Ticks ----

func tickElection(r *Core) {
	r.electionElapsed++
	if r.promotable() && r.electionElapsed >= r.randomizedElectionTimeout {
		r.electionElapsed = 0
		r.hup(false)
	}
}

func tickHeartbeat(r *Core) {
	r.heartbeatElapsed++
	r.electionElapsed++
	if r.electionElapsed >= r.cfg.ElectionTicks {
		r.electionElapsed = 0
		// A leader that has not heard from a quorum for an election
		// timeout steps down (dissertation §6.2, check-quorum).
		if r.cfg.CheckQuorum && !r.quorumActive() {
			r.becomeFollower(r.term, 0)
			return
		}
		// A transfer that did not finish within an election timeout is
		// abandoned so that the leader serves again (§3.10).
		r.abortLeaderTransfer()
	}
	for _, id := range r.members {
		if pr := r.progress[id]; pr != nil && pr.State == ProgressSnapshot {
			// The transport usually reports a failed snapshot; if nothing
			// was heard for two election timeouts, assume it was lost.
			pr.snapshotTicks++
			if pr.snapshotTicks >= 2*r.cfg.ElectionTicks {
				pr.PendingSnapshot = 0
				pr.becomeProbe()
			}
		}
	}
	if r.heartbeatElapsed >= r.cfg.HeartbeatTicks {
		r.heartbeatElapsed = 0
		for _, id := range r.members {
			if pr := r.progress[id]; pr != nil {
				pr.newHeartbeatInterval()
			}
		}
		r.bcastHeartbeat(r.reads.round)
	}
}

// quorumActive reports whether a quorum of voters answered since the last
// check, and starts a new round.
func (r *Core) quorumActive() bool {
	active := map[uint64]bool{}
	for _, id := range r.voters.IDs() {
		if pr := r.progress[id]; pr != nil {
			active[id] = id == r.id || pr.RecentActive
			if id != r.id {
				pr.RecentActive = false
			}
		}
	}
	return r.voters.VoteResult(active) == quorum.VoteWon
}

// ---- Messages in ----

// Step feeds a message from a peer into the core. It returns an error
// wrapping ErrInvalidMessage, and changes nothing, for a message no correct
// peer sends: an unknown type, one addressed to another node, one from node
// 0 or from this node, one of term 0, an append whose entries do not
// follow one another, a snapshot response that rejects, a leader's message
// (append, heartbeat, snapshot, TimeoutNow) in a term that another node
// leads, or a response acknowledging what this leader never sent.
// Everything else (stale terms, duplicates, reordering) is handled.
func (r *Core) Step(m Message) error {
	switch {
	case !m.Type.Valid():
		return fmt.Errorf("%w: unknown type %d", ErrInvalidMessage, m.Type)
	case m.To != r.id:
		return fmt.Errorf("%w: %v is addressed to %d, not %d", ErrInvalidMessage, m.Type, m.To, r.id)
	case m.From == 0 || m.From == r.id:
		return fmt.Errorf("%w: %v from node %d", ErrInvalidMessage, m.Type, m.From)
	case m.Term == 0:
		return fmt.Errorf("%w: %v from %d has term 0", ErrInvalidMessage, m.Type, m.From)
	case m.Type == MsgSnapshotResponse && m.Reject:
		return fmt.Errorf("%w: %v from %d rejects, which a snapshot response never does", ErrInvalidMessage, m.Type, m.From)
	case m.Type == MsgAppendRequest:
		if err := checkEntries(m); err != nil {
			return err
		}
	case m.Type == MsgReadIndexRequest || m.Type == MsgReadIndexResponse:
		if err := r.checkReadIndexMessage(m); err != nil {
			return err
		}
	case m.Type == MsgProposalRequest:
		if err := checkProposalRequest(m); err != nil {
			return err
		}
	case m.Type == MsgProposalResponse:
		if err := checkProposalResponse(m); err != nil {
			return err
		}
		// The answer is a fact whatever the terms (a refusal: appended
		// nowhere; an acceptance: where), so it is taken first; a newer
		// term then deposes this node as any message's would.
		r.handleProposalResponse(m)
		if m.Term <= r.term {
			return nil
		}
	}
	switch {
	case m.Term > r.term:
		if m.Type == MsgVoteRequest || m.Type == MsgPreVoteRequest {
			// While it hears from a leader, a node ignores candidates: a
			// removed or partitioned server must not disrupt a healthy
			// cluster (dissertation §4.2.3). A transfer is exempt.
			inLease := r.cfg.CheckQuorum && r.lead != 0 && r.electionElapsed < r.cfg.ElectionTicks
			if inLease && !m.Transfer {
				if m.Type == MsgPreVoteRequest && r.role == Follower {
					r.keepIgnoredPreVote(m)
				}
				return nil
			}
		}
		switch {
		case m.Type == MsgPreVoteRequest:
			// Answering a pre-vote never changes our term (§9.6).
		case m.Type == MsgPreVoteResponse && !m.Reject:
			// A granted pre-vote carries the term we would campaign in.
		case m.Type == MsgAppendRequest || m.Type == MsgHeartbeatRequest || m.Type == MsgSnapshotRequest:
			r.becomeFollower(m.Term, m.From)
		default:
			// A newer term: step down (Figure 2, All Servers).
			r.becomeFollower(m.Term, 0)
		}
	case m.Term < r.term:
		switch m.Type {
		case MsgAppendRequest, MsgHeartbeatRequest:
			// A stale leader learns of the newer term from the response
			// and steps down; without it, with pre-vote, it could go on
			// believing it leads.
			r.send(Message{Type: MsgAppendResponse, To: m.From})
		case MsgPreVoteRequest:
			r.send(Message{Type: MsgPreVoteResponse, To: m.From, Reject: true})
		case MsgReadIndexRequest:
			// A follower of a leader deposed since: refuse in our term, so
			// that it fails its reads now (and learns of the term) rather
			// than waiting for the next leader to reach it.
			r.refuseReadIndex(m)
		case MsgProposalRequest:
			// Likewise for its proposals, naming the leader we know.
			r.refuseRequest(m)
		}
		// Otherwise a stale message is ignored (Raft §5.1).
		return nil
	}
	if err := r.checkLeaderClaim(m); err != nil {
		return err
	}
	if err := r.checkAcknowledgement(m); err != nil {
		return err
	}
	switch m.Type {
	case MsgVoteRequest, MsgPreVoteRequest:
		r.handleVoteRequest(m)
	default:
		r.step(r, m)
	}
	return nil
}

// checkEntries refuses an append whose entries do not continue the log
// after (LogIndex, LogTerm): indexes one apart, terms never decreasing,
// none past the sender's term. A leader's log is like that, and so is
// every run of it.
func checkEntries(m Message) error {
	prevTerm := m.LogTerm
	for i, e := range m.Entries {
		switch {
		case e.Index != m.LogIndex+1+uint64(i):
			return fmt.Errorf("%w: %v from %d: entry %d has index %d, want %d", ErrInvalidMessage, m.Type, m.From, i, e.Index, m.LogIndex+1+uint64(i))
		case e.Term < prevTerm || e.Term > m.Term:
			return fmt.Errorf("%w: %v from %d in term %d: entry %d has term %d after term %d", ErrInvalidMessage, m.Type, m.From, m.Term, e.Index, e.Term, prevTerm)
		}
		prevTerm = e.Term
	}
	return nil
}

// checkAcknowledgement refuses, on the leader, a response of its term that
// acknowledges an index past its log or a read round it never started: a
// follower acknowledges only what this leader sent it, and this leader's log
// only grows during its term. Taken in, the first would break Progress's
// invariant Match <= last index.
func (r *Core) checkAcknowledgement(m Message) error {
	if r.role != Leader {
		return nil
	}
	switch {
	case (m.Type == MsgAppendResponse && !m.Reject) || m.Type == MsgSnapshotResponse:
		if last := r.log.lastIndex(); m.LogIndex > last {
			return fmt.Errorf("%w: %v from %d acknowledges index %d, past the leader's last index %d", ErrInvalidMessage, m.Type, m.From, m.LogIndex, last)
		}
	case m.Type == MsgHeartbeatResponse && m.ReadRound > r.reads.round:
		return fmt.Errorf("%w: %v from %d answers read round %d; the latest sent is %d", ErrInvalidMessage, m.Type, m.From, m.ReadRound, r.reads.round)
	}
	return nil
}

// checkLeaderClaim refuses a message that only a leader sends, in this
// node's term, from a node that cannot be that term's leader: this node
// leads the term itself, or follows another node in it. A term has at most
// one leader (Election Safety, Raft §5.2), so no correct peer sends it; two
// nodes configured with the same ID can. The message is ignored, as etcd
// ignores it, and the caller hears why.
func (r *Core) checkLeaderClaim(m Message) error {
	switch m.Type {
	case MsgAppendRequest, MsgHeartbeatRequest, MsgSnapshotRequest, MsgTimeoutNow:
	default:
		return nil
	}
	switch {
	case r.role == Leader:
		return fmt.Errorf("%w: %v from %d in term %d, which node %d leads (two leaders in one term: a duplicate node ID?)",
			ErrInvalidMessage, m.Type, m.From, m.Term, r.id)
	case r.lead != 0 && r.lead != m.From:
		return fmt.Errorf("%w: %v from %d in term %d, whose leader is %d (two leaders in one term: a duplicate node ID?)",
			ErrInvalidMessage, m.Type, m.From, m.Term, r.lead)
	}
	return nil
}

// handleVoteRequest decides a vote or pre-vote (Figure 2, RequestVote),
// and reports whether it granted it.
func (r *Core) handleVoteRequest(m Message) bool {
	response := MsgVoteResponse
	if m.Type == MsgPreVoteRequest {
		response = MsgPreVoteResponse
	}
	// One vote per term: we may vote again only for the same candidate,
	// and not at all once we follow a leader in this term. A pre-vote for
	// a later term promises nothing.
	canVote := r.vote == m.From || (r.vote == 0 && r.lead == 0) ||
		(m.Type == MsgPreVoteRequest && m.Term > r.term)
	// A log that lost acknowledged entries cannot judge whether the
	// candidate's log holds every committed entry (§5.4.1): it abstains.
	canVote = canVote && r.logLost == nil
	// Only for a candidate whose log is at least as up-to-date (§5.4.1).
	if canVote && r.log.isUpToDate(m.LogIndex, m.LogTerm) {
		r.send(Message{Type: response, To: m.From, Term: m.Term})
		if m.Type == MsgVoteRequest {
			// The vote is in HardState, which the Ready contract persists
			// before this response is sent.
			r.electionElapsed = 0
			r.vote = m.From
		}
		return true
	}
	r.send(Message{Type: response, To: m.From, Reject: true})
	return false
}

func stepFollower(r *Core, m Message) {
	switch m.Type {
	case MsgAppendRequest:
		r.heardLeader(m.From)
		r.handleAppend(m)
	case MsgHeartbeatRequest:
		r.heardLeader(m.From)
		r.handleHeartbeat(m)
	case MsgSnapshotRequest:
		r.heardLeader(m.From)
		r.handleSnapshot(m)
	case MsgTimeoutNow:
		// The leader hands over: campaign now, skipping pre-vote (§3.10).
		r.hup(true)
	case MsgReadIndexRequest:
		r.refuseReadIndex(m)
	case MsgReadIndexResponse:
		r.handleReadIndexResponse(m)
	case MsgProposalRequest:
		// No second hop: the sender's leader is stale; say which we know.
		r.refuseRequest(m)
	}
}

// refuseReadIndex answers a read index request this node cannot serve: it
// does not lead the term (a leader that stepped down keeps its term), and
// the requester should not wait for an answer that will never come.
func (r *Core) refuseReadIndex(m Message) {
	r.send(Message{Type: MsgReadIndexResponse, To: m.From, ReadRound: m.ReadRound, Reject: true})
}

// heardLeader notes that the leader of this term spoke: the election
// timeout starts again, and the pre-votes ignored while it was silent
// less than a timeout are forgotten (it is live).
func (r *Core) heardLeader(id uint64) {
	r.electionElapsed = 0
	r.lead = id
	r.ignoredPreVotes = r.ignoredPreVotes[:0]
}

func stepCandidate(r *Core, m Message) {
	response := MsgVoteResponse
	if r.role == PreCandidate {
		response = MsgPreVoteResponse
	}
	switch m.Type {
	case MsgAppendRequest:
		// A leader of this term exists: return to follower (Figure 2).
		r.becomeFollower(m.Term, m.From)
		r.handleAppend(m)
	case MsgHeartbeatRequest:
		r.becomeFollower(m.Term, m.From)
		r.handleHeartbeat(m)
	case MsgSnapshotRequest:
		r.becomeFollower(m.Term, m.From)
		r.handleSnapshot(m)
	case MsgReadIndexRequest:
		r.refuseReadIndex(m)
	case MsgProposalRequest:
		r.refuseRequest(m)
	case response:
		switch r.poll(m.From, !m.Reject) {
		case quorum.VoteWon:
			if r.role == PreCandidate {
				r.campaign(false, false)
			} else {
				r.becomeLeader()
			}
		case quorum.VoteLost:
			r.becomeFollower(r.term, 0)
		}
	}
}

// stepLeader handles responses; requests only a leader sends were refused
// by Step (checkLeaderClaim).
func stepLeader(r *Core, m Message) {
	pr := r.progress[m.From]
	if pr == nil {
		return // not a member (any more)
	}
	defer func() {
		if pr.Match > r.log.lastIndex() {
			assert.Fail("node %d: progress of %d matches %d, past the last index %d", r.id, m.From, pr.Match, r.log.lastIndex())
		}
	}()
	switch m.Type {
	case MsgAppendResponse:
		pr.RecentActive = true
		r.handleAppendResponse(m, pr)
	case MsgHeartbeatResponse:
		pr.RecentActive = true
		pr.ProbeSent = false
		switch {
		case pr.emptyAppendDue(r.log.lastIndex()):
			// It has appends unacknowledged and gets no new entries:
			// an empty append finds out whether an append or its
			// acknowledgement was lost, without freeing a slot.
			r.sendEmptyAppend(m.From, pr)
		case pr.State == ProgressReplicate:
			// Entries the window has room for, if any are new.
			r.sendAppend(m.From, false)
		case pr.Match < r.log.lastIndex() || pr.State == ProgressProbe:
			// A follower behind the log gets what it lacks; a follower
			// in Probe gets an append even if caught up, since its
			// answer is what ends the probe (see handleAppendResponse).
			r.sendAppend(m.From, true)
		}
		if m.ReadRound != 0 {
			r.ackRead(m.From, m.ReadRound)
		}
	case MsgReadIndexRequest:
		// A follower's read, treated as the leader's own (§6.4): the
		// commit index now, confirmed by a heartbeat round after it.
		r.readFor(readRequest{from: m.From, id: m.ReadRound})
	case MsgSnapshotResponse:
		pr.RecentActive = true
		if pr.State != ProgressSnapshot {
			return
		}
		pr.maybeUpdate(m.LogIndex)
		pr.becomeProbe()
		r.sendAppend(m.From, true)
	case MsgProposalRequest:
		r.appendForwarded(m)
	}
}

// handleAppend is the receiver's side of AppendEntries (Figure 2).
func (r *Core) handleAppend(m Message) {
	if m.LogIndex < r.log.committed {
		// Everything up to our commit index matches the leader already
		// (Leader Completeness); say how far we are.
		r.send(Message{Type: MsgAppendResponse, To: m.From, LogIndex: r.log.committed})
		return
	}
	// Reply false if the log doesn't contain an entry at prevLogIndex whose
	// term matches prevLogTerm (Figure 2, receiver step 2), with a hint.
	if !r.log.matchTerm(m.LogIndex, m.LogTerm) {
		hintIndex, hintTerm := r.log.findConflictByTerm(min(m.LogIndex, r.log.lastIndex()), m.LogTerm)
		r.send(Message{Type: MsgAppendResponse, To: m.From, LogIndex: m.LogIndex, Reject: true,
			HintIndex: hintIndex, HintTerm: hintTerm})
		return
	}
	lastNew := m.LogIndex + uint64(len(m.Entries))
	// Delete a conflicting entry and all that follow it, then append
	// what is new (receiver steps 3 and 4). Entries we already hold are
	// kept: a delayed, shorter append must not truncate newer ones.
	if conflict := r.log.findConflict(m.Entries); conflict != 0 {
		if conflict <= r.log.committed {
			assert.Fail("node %d: entry %d conflicts with the committed log (commit %d)", r.id, conflict, r.log.committed)
		}
		r.appendToLog(m.Entries[conflict-(m.LogIndex+1):])
	}
	if r.logLost != nil && r.log.lastIndex() >= r.logLost.Commit {
		// A leader gave back the entries the disk lost.
		r.logLost = nil
	}
	// leaderCommit > commitIndex: commitIndex = min(leaderCommit, index of
	// last new entry) (receiver step 5).
	r.commitFromLeader(min(m.Commit, lastNew), m)
	r.send(Message{Type: MsgAppendResponse, To: m.From, LogIndex: lastNew})
}

func (r *Core) handleHeartbeat(m Message) {
	r.commitFromLeader(m.Commit, m)
	r.send(Message{Type: MsgHeartbeatResponse, To: m.From, ReadRound: m.ReadRound})
}

// commitFromLeader raises the commit index to what leader m.From says is
// committed. A leader says so only of entries this node acknowledged
// (bcastHeartbeat caps it at the follower's Match), so a commit index past
// our last index means our storage lost synced entries. That is a disk
// failing, not a broken invariant of this code: it is recorded (LogLost)
// and the commit index stays where it is.
func (r *Core) commitFromLeader(commit uint64, m Message) {
	if last := r.log.lastIndex(); commit > last {
		if r.logLost == nil {
			r.logLost = &LogLost{Leader: m.From, Term: m.Term, Commit: commit, LastIndex: last}
		}
		return
	}
	r.log.commitTo(commit)
}

// handleSnapshot is the receiver's side of InstallSnapshot (Raft §7).
func (r *Core) handleSnapshot(m Message) {
	if r.restore(m.Snapshot) {
		r.send(Message{Type: MsgSnapshotResponse, To: m.From, LogIndex: r.log.lastIndex()})
		return
	}
	r.send(Message{Type: MsgSnapshotResponse, To: m.From, LogIndex: r.log.committed})
}

// restore installs a snapshot unless the log already covers it. If the log
// has the snapshot's last entry, the entries after it are kept (Figure 13,
// step 6); otherwise the whole log is discarded (step 7).
func (r *Core) restore(s Snapshot) bool {
	if s.Metadata.Index <= r.log.committed {
		return false
	}
	if r.log.matchTerm(s.Metadata.Index, s.Metadata.Term) {
		r.log.commitTo(s.Metadata.Index)
		return false
	}
	r.log.restore(s)
	r.confPoints = []confPoint{{index: s.Metadata.Index, conf: s.Metadata.ConfState}}
	r.setConf(s.Metadata.ConfState)
	return true
}

func (r *Core) handleAppendResponse(m Message, pr *Progress) {
	if m.Reject {
		next := m.HintIndex
		if m.HintTerm > 0 {
			// Skip our own entries of terms the follower lacks too.
			next, _ = r.log.findConflictByTerm(m.HintIndex, m.HintTerm)
		}
		if pr.maybeDecrTo(m.LogIndex, next) {
			r.sendAppend(m.From, true)
		}
		return
	}
	// An answer at the index already known is news to a probe: it shows
	// where the follower's log matches, so a caught-up follower moved to
	// Probe (by ReportUnreachable, say) returns to Replicate. Without it,
	// such a follower stayed in Probe until the next proposal (etcd's
	// heartbeat_resp_recovers_from_probing).
	probeAnswered := pr.State == ProgressProbe && m.LogIndex == pr.Match
	if !pr.maybeUpdate(m.LogIndex) && !probeAnswered {
		return
	}
	switch pr.State {
	case ProgressProbe:
		pr.becomeReplicate()
	case ProgressSnapshot:
		// The follower caught up past the compacted prefix: appends suffice.
		if pr.Match+1 >= r.log.firstIndex() {
			pr.becomeReplicate()
		}
	}
	if r.maybeCommit() {
		r.needBroadcast = true
	}
	if r.role != Leader {
		return // a removed leader stepped down
	}
	// Pipeline: fill the follower's window.
	for r.sendAppend(m.From, false) {
	}
	if m.From == r.leadTransferee && pr.Match == r.log.lastIndex() {
		r.send(Message{Type: MsgTimeoutNow, To: m.From})
	}
}

// maybeCommit advances the commit index to what a majority of voters holds,
// counting only an entry of the current term (Raft §5.4.2, Figure 8).
func (r *Core) maybeCommit() bool {
	index := r.voters.CommittedIndex(func(id uint64) uint64 {
		if pr := r.progress[id]; pr != nil {
			return pr.Match
		}
		return 0
	})
	if !r.log.maybeCommit(index, r.term) {
		return false
	}
	if r.reads.waiting != nil {
		// The first entry of the term is committed: reads may proceed.
		waiting := r.reads.waiting
		r.reads.waiting = nil
		for _, req := range waiting {
			r.startRead(req)
		}
	}
	latest := r.confPoints[len(r.confPoints)-1].index
	if r.conf.IsJoint() && r.log.committed >= latest && r.pendingConfIndex <= r.log.committed {
		// The joint configuration is committed: now propose the new one
		// alone (dissertation §4.3).
		r.pendingConfIndex = r.appendEntry(Entry{Type: EntryConfChange, Data: ConfChange{}.Marshal()})
		return true
	}
	// A leader that removed itself leads until the change commits, then
	// steps down (dissertation §4.2.2), after telling followers the news.
	if r.role == Leader && !r.conf.IsJoint() && !r.conf.IsVoter(r.id) && r.log.committed >= latest {
		r.bcastAppend()
		r.becomeFollower(r.term, 0)
	}
	return true
}

// ---- Messages out ----

func (r *Core) send(m Message) {
	m.From = r.id
	if m.Term == 0 {
		m.Term = r.term
	}
	r.msgs = append(r.msgs, m)
}

// sendAppend sends the follower what it needs next: entries from Next, or
// a snapshot if they were compacted. With no new entries it sends an empty
// append only if sendIfEmpty. It reports whether it sent anything.
func (r *Core) sendAppend(to uint64, sendIfEmpty bool) bool {
	pr := r.progress[to]
	if pr == nil || to == r.id || pr.isPaused() {
		return false
	}
	if !sendIfEmpty && pr.Next > r.log.lastIndex() {
		return false // nothing new
	}
	return r.sendAppendAfter(to, pr, true)
}

// sendEmptyAppend sends an append of no entries after the last one sent to
// a replicating follower (emptyAppendDue), even with its window full: its
// answer acknowledges what the follower holds, or rejects, and carries no
// entry data past the window.
func (r *Core) sendEmptyAppend(to uint64, pr *Progress) {
	r.sendAppendAfter(to, pr, false)
}

// sendAppendAfter sends an append after entry Next-1, with the entries
// from Next (up to MaxAppendBytes) if withEntries, or a snapshot if the
// log there was compacted. It reports whether it sent anything.
func (r *Core) sendAppendAfter(to uint64, pr *Progress, withEntries bool) bool {
	prevIndex := pr.Next - 1
	prevTerm, err := r.log.term(prevIndex)
	var entries []Entry
	if err == nil && withEntries {
		entries, err = r.log.entries(pr.Next, r.cfg.MaxAppendBytes)
	}
	if errors.Is(err, ErrCompacted) {
		return r.sendSnapshot(to, pr)
	}
	assert.NoError(err, "leader reading its log")
	r.send(Message{Type: MsgAppendRequest, To: to, LogIndex: prevIndex, LogTerm: prevTerm,
		Entries: entries, Commit: r.log.committed})
	pr.sentEntries(len(entries), prevIndex+uint64(len(entries)), entriesBytes(entries))
	return true
}

func (r *Core) sendSnapshot(to uint64, pr *Progress) bool {
	if !pr.RecentActive {
		return false // not worth a snapshot until it answers
	}
	snap, err := r.cfg.Storage.Snapshot()
	if errors.Is(err, ErrSnapshotTemporarilyUnavailable) {
		return false
	}
	assert.NoError(err, "storage Snapshot")
	if snap.IsEmpty() {
		assert.Fail("node %d: entries for %d are compacted but storage has no snapshot", r.id, to)
	}
	r.send(Message{Type: MsgSnapshotRequest, To: to, Snapshot: snap})
	pr.becomeSnapshot(snap.Metadata.Index)
	return true
}

func (r *Core) bcastAppend() {
	for _, id := range r.members {
		r.sendAppend(id, true)
	}
}

func (r *Core) bcastHeartbeat(round uint64) {
	for _, id := range r.members {
		pr := r.progress[id]
		if id == r.id || pr == nil {
			continue
		}
		// Never tell a follower to commit past what it is known to hold.
		r.send(Message{Type: MsgHeartbeatRequest, To: id, Commit: min(pr.Match, r.log.committed), ReadRound: round})
	}
}

// ---- Local requests ----

// Tick advances the core's clock by one tick: election timeouts on
// followers and candidates, heartbeats and check-quorum on the leader.
func (r *Core) Tick() {
	r.tick(r)
	r.tickForwards()
}

// Campaign starts an election now, as if the election timeout had elapsed
// (with pre-vote if configured). Tests and operators use it.
func (r *Core) Campaign() { r.hup(false) }

// Propose appends data to the log if this node leads. It returns the index
// and term the entry got: the command is committed if and only if the
// entry committed at that index has that term.
func (r *Core) Propose(data []byte) (index, term uint64, err error) {
	if err := r.checkProposal(uint64(len(data))); err != nil {
		return 0, 0, err
	}
	index = r.appendEntry(Entry{Type: EntryNormal, Data: data})
	return index, r.term, nil
}

// ProposeConfChange proposes a membership change (dissertation §4.1). It is
// refused with ErrConfChangePending while an earlier change, or the leader's
// first entry of its term, is uncommitted; with ErrInvalidConfChange if the
// change is not allowed; with ErrNotCaughtUp if a new voter is not a learner
// that holds the committed log.
func (r *Core) ProposeConfChange(cc ConfChange) (index, term uint64, err error) {
	data := cc.Marshal()
	if err := r.checkProposal(uint64(len(data))); err != nil {
		return 0, 0, err
	}
	// One change at a time, and none until an entry of this term is
	// committed: the dissertation's fix to single-server changes (§4.1, and
	// its errata).
	if r.pendingConfIndex > r.log.committed || r.log.termOrZero(r.log.committed) != r.term {
		return 0, 0, fmt.Errorf("%w: commit index %d, pending change at %d", ErrConfChangePending, r.log.committed, r.pendingConfIndex)
	}
	next, err := ApplyConfChange(r.conf, cc)
	if err != nil {
		return 0, 0, err
	}
	for _, id := range next.Voters {
		if r.conf.IsVoter(id) {
			continue
		}
		pr := r.progress[id]
		if !r.conf.IsLearner(id) || pr == nil || pr.Match < r.log.committed {
			return 0, 0, fmt.Errorf("%w: node %d", ErrNotCaughtUp, id)
		}
	}
	index = r.appendEntry(Entry{Type: EntryConfChange, Data: data})
	r.pendingConfIndex = index
	return index, r.term, nil
}

func (r *Core) checkProposal(size uint64) error {
	switch {
	case r.role != Leader || !r.voters.Contains(r.id):
		return fmt.Errorf("%w: node %d is %v, leader is %d", ErrNotLeader, r.id, r.role, r.lead)
	case r.leadTransferee != 0:
		return fmt.Errorf("%w: leadership transfer to %d in progress", ErrProposalDropped, r.leadTransferee)
	case r.cfg.MaxUncommittedBytes > 0 && r.uncommittedBytes > 0 && r.uncommittedBytes+size > r.cfg.MaxUncommittedBytes:
		return fmt.Errorf("%w: %d uncommitted bytes, limit %d", ErrProposalDropped, r.uncommittedBytes, r.cfg.MaxUncommittedBytes)
	}
	return nil
}

// appendEntry appends one entry of the leader's term and returns its index.
func (r *Core) appendEntry(e Entry) uint64 {
	e.Term = r.term
	e.Index = r.log.lastIndex() + 1
	r.appendToLog([]Entry{e})
	// The leader's own Match moves in Advance, once the entry is
	// persisted: the caller may send the appends before or while it
	// writes (§10.2.1), and a quorum must not count a copy that a crash
	// can still lose.
	r.uncommittedBytes += uint64(len(e.Data))
	r.needBroadcast = true
	return e.Index
}

// TransferLeadership asks this leader to hand over to a voter (§3.10): it
// stops taking proposals, brings the target up to date, then tells it to
// campaign at once. It is abandoned after an election timeout.
func (r *Core) TransferLeadership(to uint64) error {
	switch {
	case r.role != Leader:
		return fmt.Errorf("%w: node %d is %v", ErrNotLeader, r.id, r.role)
	case to == r.id:
		return nil
	case !r.conf.IsVoter(to):
		return fmt.Errorf("%w: node %d is not a voter", ErrTransferTarget, to)
	case r.leadTransferee == to:
		return nil
	}
	r.abortLeaderTransfer()
	r.leadTransferee = to
	r.electionElapsed = 0
	if pr := r.progress[to]; pr.Match == r.log.lastIndex() {
		r.send(Message{Type: MsgTimeoutNow, To: to})
	} else {
		r.sendAppend(to, true)
	}
	return nil
}

func (r *Core) abortLeaderTransfer() { r.leadTransferee = 0 }

// ReportUnreachable tells the leader that a message to id could not be
// delivered, so it stops pipelining to it and probes instead.
func (r *Core) ReportUnreachable(id uint64) {
	if pr := r.progress[id]; r.role == Leader && pr != nil && pr.State == ProgressReplicate {
		pr.becomeProbe()
	}
}

// ReportSnapshot tells the leader whether sending a snapshot to id failed.
func (r *Core) ReportSnapshot(id uint64, failed bool) {
	pr := r.progress[id]
	if r.role != Leader || pr == nil || pr.State != ProgressSnapshot {
		return
	}
	if failed {
		pr.PendingSnapshot = 0
	}
	pr.becomeProbe()
	// Wait for a heartbeat response before sending again.
	pr.ProbeSent = true
}

// ---- Ready / Advance ----

// flush sends what was batched since the last Ready.
func (r *Core) flush() {
	if r.reads.needRequest {
		r.sendReadRequest()
	}
	if r.role != Leader {
		r.needBroadcast = false
		r.reads.needHeartbeat = false
		return
	}
	if r.needBroadcast {
		r.needBroadcast = false
		r.bcastAppend()
	}
	if r.reads.needHeartbeat {
		r.reads.needHeartbeat = false
		r.reads.round++
		r.ackRead(r.id, r.reads.round)
		r.bcastHeartbeat(r.reads.round)
	}
}

// HasReady reports whether Ready would return any work.
func (r *Core) HasReady() bool {
	if r.readyOutstanding {
		return false
	}
	return (r.role == Leader && (r.needBroadcast || r.reads.needHeartbeat)) ||
		r.softState() != r.prevSoft || r.hardState() != r.prevHard ||
		len(r.log.unstable.entries) > 0 || r.log.pendingSnapshot() != nil ||
		len(r.msgs) > 0 || len(r.readStates) > 0 || len(r.droppedReads) > 0 || len(r.forwards.results) > 0 || r.reads.needRequest ||
		r.log.hasNextCommittedEntries()
}

// Ready returns the work to do now (see Ready for the order). Every Ready
// must be confirmed with Advance before the next call to Ready.
func (r *Core) Ready() Ready {
	if r.readyOutstanding {
		assert.Fail("node %d: Ready called again before Advance", r.id)
	}
	r.flush()
	rd := Ready{
		Entries:          r.log.unstableEntries(),
		CommittedEntries: r.log.nextCommittedEntries(),
		Messages:         r.msgs,
		ReadStates:       r.readStates,
		DroppedReads:     r.droppedReads,
		ForwardResults:   r.forwards.results,
	}
	if soft := r.softState(); soft != r.prevSoft {
		rd.SoftState = &soft
		r.prevSoft = soft
	}
	if hs := r.hardState(); hs != r.prevHard {
		rd.HardState = hs
		rd.MustSync = hs.Term != r.prevHard.Term || hs.Vote != r.prevHard.Vote
		r.prevHard = hs
	}
	if snap := r.log.pendingSnapshot(); snap != nil {
		rd.Snapshot = *snap
		// The entries after a snapshot come in a later Ready
		// (hasNextCommittedEntries): an application that applies a
		// Ready's committed entries ahead of its write, as node.Handler
		// does, would otherwise apply them before the snapshot.
		assert.That(len(rd.CommittedEntries) == 0, "node %d: a Ready with snapshot %d and %d committed entries", r.id, snap.Metadata.Index, len(rd.CommittedEntries))
	}
	rd.MustSync = rd.MustSync || len(rd.Entries) > 0 || !rd.Snapshot.IsEmpty()
	if n := len(rd.CommittedEntries); n > 0 {
		r.log.applying = rd.CommittedEntries[n-1].Index
		rd.ConfChanges = r.committedConfChanges(rd.CommittedEntries[0].Index, r.log.applying)
	}
	r.msgs = nil
	r.readStates = nil
	r.droppedReads = nil
	r.forwards.results = nil
	r.readyOutstanding = true
	return rd
}

// committedConfChanges returns the membership changes of the entries in
// [lo, hi] that took effect, as worked out when they were appended.
func (r *Core) committedConfChanges(lo, hi uint64) []CommittedConfChange {
	var out []CommittedConfChange
	for _, p := range r.confPoints[1:] {
		if p.index >= lo && p.index <= hi {
			out = append(out, CommittedConfChange{Index: p.index, Term: p.term, Change: p.change, Conf: p.conf})
		}
	}
	return out
}

// Advance confirms that rd was handled: its entries and snapshot are
// persisted and its committed entries applied.
func (r *Core) Advance(rd Ready) {
	if !r.readyOutstanding {
		assert.Fail("node %d: Advance without Ready", r.id)
	}
	r.readyOutstanding = false
	if n := len(rd.Entries); n > 0 {
		r.log.stableTo(rd.Entries[n-1].Index, rd.Entries[n-1].Term)
	}
	if !rd.Snapshot.IsEmpty() {
		r.log.stableSnapTo(rd.Snapshot.Metadata.Index)
		r.log.appliedTo(rd.Snapshot.Metadata.Index)
	}
	if n := len(rd.CommittedEntries); n > 0 {
		r.log.appliedTo(rd.CommittedEntries[n-1].Index)
		// The application has recorded the applied changes: the latest
		// of them becomes the base.
		for len(r.confPoints) > 1 && r.confPoints[1].index <= r.log.applied {
			r.confPoints = r.confPoints[1:]
		}
		if r.role == Leader {
			var size uint64
			for _, e := range rd.CommittedEntries {
				size += uint64(len(e.Data))
			}
			r.uncommittedBytes -= min(size, r.uncommittedBytes)
		}
	}
	if n := len(rd.Entries); n > 0 && r.role == Leader {
		r.persisted(rd.Entries[n-1])
	}
}

// persisted counts the leader's own copy of its log up to e, which the
// caller has now persisted, towards a quorum. The caller may send the
// appends of a Ready before it persists that Ready's entries, so that the
// leader's disk write overlaps the followers' (dissertation §10.2.1); the
// leader's Match, and with it the commit index, moves only here, so an
// entry never counts as committed on the strength of a copy that a crash of
// the leader could lose.
func (r *Core) persisted(e Entry) {
	pr := r.progress[r.id]
	if pr == nil || !r.log.matchTerm(e.Index, e.Term) || !pr.maybeUpdate(e.Index) {
		return
	}
	if r.maybeCommit() {
		r.needBroadcast = true
	}
}

// ---- Status ----

// ID returns this node's ID.
func (r *Core) ID() uint64 { return r.id }

// Status returns a copy of the node's state.
func (r *Core) Status() Status {
	s := Status{
		ID:             r.id,
		HardState:      r.hardState(),
		SoftState:      r.softState(),
		Applied:        r.log.applied,
		LastIndex:      r.log.lastIndex(),
		Conf:           r.conf,
		LeadTransferee: r.leadTransferee,
	}
	if r.logLost != nil {
		lost := *r.logLost
		s.LogLost = &lost
	}
	if r.role == Leader {
		s.Progress = map[uint64]Progress{}
		for id, pr := range r.progress {
			s.Progress[id] = *pr
		}
	}
	return s
}

package raft_test

// The extended Raft paper's Figure 2, claim by claim, as etcd's
// raft_paper_test.go does it: each test quotes the sentence it checks (and
// §5.4.1, §5.4.2, §6, §7 and §8 where they add rules). The core runs alone
// here, without pre-vote or check-quorum unless a test is about them: the
// test plays every peer, steps messages in and reads what comes out of
// each Ready. Where coord does something else than the sentence says, the
// test says so, and docs/raft.md ("Where coord differs") says why it is
// safe.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"coord/raft"
	"coord/raft/rafttest"
)

// paperLog returns a log whose entry 1 is the membership of voters, of
// term 1 (as a bootstrap writes it), followed by entries of the given
// terms from index 2 on.
func paperLog(voters []uint64, terms ...uint64) []raft.Entry {
	var cc raft.ConfChange
	for _, id := range voters {
		cc.Changes = append(cc.Changes, raft.ConfChangeSingle{Type: raft.ConfChangeAddVoter, NodeID: id})
	}
	log := []raft.Entry{{Index: 1, Term: 1, Type: raft.EntryConfChange, Data: cc.Marshal()}}
	for i, term := range terms {
		log = append(log, raft.Entry{Index: uint64(i + 2), Term: term, Data: fmt.Appendf(nil, "e%d", i+2)})
	}
	return log
}

// peer is one core the test drives by hand, with its storage and what it
// applied.
type peer struct {
	t       *testing.T
	id      uint64
	core    *raft.Core
	storage *raft.MemoryStorage
	readies []raft.Ready // every Ready handled, in order
	applied []raft.Entry
}

// newPeer starts node id on a storage holding paperLog(voters, terms...)
// and hs (its Term raised to the last entry's, its Commit to at least the
// membership entry), without pre-vote or check-quorum; tweak, if set,
// changes the configuration further.
func newPeer(t *testing.T, id uint64, voters []uint64, hs raft.HardState, terms []uint64, tweak func(*raft.Config)) *peer {
	t.Helper()
	s := raft.NewMemoryStorage()
	log := paperLog(voters, terms...)
	if err := s.Append(log); err != nil {
		t.Fatal(err)
	}
	hs.Term = max(hs.Term, log[len(log)-1].Term)
	hs.Commit = max(hs.Commit, 1)
	if err := s.SetHardState(hs); err != nil {
		t.Fatal(err)
	}
	cfg := rafttest.DefaultConfig(id)
	cfg.Storage = s
	cfg.PreVote, cfg.CheckQuorum = false, false
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := raft.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{t: t, id: id, core: c, storage: s}
	p.flush()
	return p
}

// flush handles every Ready as the contract says (persist, collect the
// messages, apply, advance) and returns the messages.
func (p *peer) flush() []raft.Message {
	p.t.Helper()
	var msgs []raft.Message
	for p.core.HasReady() {
		rd := p.core.Ready()
		p.readies = append(p.readies, rd)
		if !rd.HardState.IsEmpty() {
			if err := p.storage.SetHardState(rd.HardState); err != nil {
				p.t.Fatal(err)
			}
		}
		if !rd.Snapshot.IsEmpty() {
			if err := p.storage.ApplySnapshot(rd.Snapshot); err != nil {
				p.t.Fatal(err)
			}
		}
		if err := p.storage.Append(rd.Entries); err != nil {
			p.t.Fatal(err)
		}
		msgs = append(msgs, rd.Messages...)
		p.applied = append(p.applied, rd.CommittedEntries...)
		p.core.Advance(rd)
	}
	return msgs
}

// step delivers m (addressed to this peer) and returns what the peer sent.
func (p *peer) step(m raft.Message) []raft.Message {
	p.t.Helper()
	m.To = p.id
	if err := p.core.Step(m); err != nil {
		p.t.Fatalf("node %d: Step(%v): %v", p.id, m, err)
	}
	return p.flush()
}

// tick ticks n times and returns what the peer sent.
func (p *peer) tick(n int) []raft.Message {
	var msgs []raft.Message
	for range n {
		p.core.Tick()
		msgs = append(msgs, p.flush()...)
	}
	return msgs
}

func (p *peer) status() raft.Status { return p.core.Status() }

// terms returns the terms of the stored log from index 1.
func (p *peer) terms() []uint64 {
	last, _ := p.storage.LastIndex()
	entries, err := p.storage.Entries(1, last+1, 0)
	if err != nil {
		p.t.Fatal(err)
	}
	var terms []uint64
	for _, e := range entries {
		terms = append(terms, e.Term)
	}
	return terms
}

// lead makes p (a voter among voters) leader of the next term with votes
// from the others, and returns what it sent on winning.
func (p *peer) lead(voters []uint64) []raft.Message {
	p.t.Helper()
	p.core.Campaign()
	p.flush()
	term := p.status().Term
	var msgs []raft.Message
	for _, id := range voters {
		if id != p.id && p.status().Role != raft.Leader {
			msgs = append(msgs, p.step(raft.Message{Type: raft.MsgVoteResponse, From: id, Term: term})...)
		}
	}
	if p.status().Role != raft.Leader {
		p.t.Fatalf("node %d did not become leader: %+v", p.id, p.status())
	}
	return msgs
}

func ofType(msgs []raft.Message, t raft.MessageType) []raft.Message {
	var out []raft.Message
	for _, m := range msgs {
		if m.Type == t {
			out = append(out, m)
		}
	}
	return out
}

var three = []uint64{1, 2, 3}

// ---- State ----

// Figure 2, State: "Persistent state on all servers: (Updated on stable
// storage before responding to RPCs) currentTerm, votedFor, log[]". The
// Ready that carries a granted vote carries the term and vote to persist,
// and the Ready that acknowledges entries carries the entries, both with
// MustSync: the caller persists them before sending (the Ready contract).
func TestFigure2PersistentStateIsSavedBeforeResponding(t *testing.T) {
	p := newPeer(t, 2, three, raft.HardState{}, nil, nil)
	p.step(raft.Message{Type: raft.MsgVoteRequest, From: 1, Term: 2, LogIndex: 1, LogTerm: 1})
	rd := p.readies[len(p.readies)-1]
	if len(rd.Messages) != 1 || rd.Messages[0].Type != raft.MsgVoteResponse || rd.Messages[0].Reject {
		t.Fatalf("want a granted vote, got %v", rd.Messages)
	}
	if rd.HardState.Term != 2 || rd.HardState.Vote != 1 || !rd.MustSync {
		t.Fatalf("the Ready granting the vote persists %+v, MustSync %v; want term 2, vote 1, synced", rd.HardState, rd.MustSync)
	}
	p.step(raft.Message{Type: raft.MsgAppendRequest, From: 1, Term: 2, LogIndex: 1, LogTerm: 1,
		Entries: []raft.Entry{{Index: 2, Term: 2}, {Index: 3, Term: 2}}})
	rd = p.readies[len(p.readies)-1]
	if len(rd.Messages) != 1 || rd.Messages[0].Type != raft.MsgAppendResponse || rd.Messages[0].LogIndex != 3 {
		t.Fatalf("want an acknowledgement of 3, got %v", rd.Messages)
	}
	if len(rd.Entries) != 2 || rd.Entries[1].Index != 3 || !rd.MustSync {
		t.Fatalf("the Ready acknowledging 3 persists entries %v, MustSync %v", rd.Entries, rd.MustSync)
	}
}

// Figure 2, State: "commitIndex: index of highest log entry known to be
// committed (initialized to 0, increases monotonically); lastApplied:
// index of highest log entry applied to state machine (initialized to 0,
// increases monotonically)". A node that joins starts at 0 and 0 (a
// bootstrapped one at 1: the membership entry every initial member
// writes is committed); through elections, partitions and crashes neither
// ever moves back.
func TestFigure2CommitIndexAndLastAppliedStartAtZeroAndOnlyGrow(t *testing.T) {
	n := rafttest.NewNetwork()
	if err := n.Bootstrap(1, 2, 3); err != nil {
		t.Fatal(err)
	}
	if err := n.AddNode(4); err != nil {
		t.Fatal(err)
	}
	if st := n.Nodes[4].Core.Status(); st.Commit != 0 || st.Applied != 0 {
		t.Fatalf("a joining node starts at commit %d, applied %d; want 0 and 0", st.Commit, st.Applied)
	}
	seen := map[uint64][2]uint64{}
	check := func(when string) {
		for _, id := range n.IDs() {
			node := n.Nodes[id]
			if _, err := n.Node(id); err != nil {
				continue // crashed
			}
			st := node.Core.Status()
			if prev := seen[id]; st.Commit < prev[0] || st.Applied < prev[1] {
				t.Fatalf("%s: node %d went from commit %d applied %d to commit %d applied %d", when, id, prev[0], prev[1], st.Commit, st.Applied)
			}
			seen[id] = [2]uint64{st.Commit, st.Applied}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		switch id := uint64(rng.IntN(3) + 1); rng.IntN(10) {
		case 0:
			n.Isolate(id)
		case 1:
			n.Heal()
		case 2:
			if _, err := n.Node(id); err == nil && n.Leader() != 0 {
				_ = n.Crash(id)
			} else if err != nil {
				if err := n.Restart(id); err != nil {
					t.Fatal(err)
				}
			}
		default:
			if lead := n.Leader(); lead != 0 {
				_, _, _ = n.Nodes[lead].Core.Propose(fmt.Appendf(nil, "x%d", i))
			}
		}
		for _, id := range n.IDs() {
			if _, err := n.Node(id); err == nil {
				if err := n.Tick(id, 1); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := n.Deliver(nil); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("step %d", i))
		if err := n.Check(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if top := slices.Max([]uint64{seen[1][0], seen[2][0], seen[3][0], seen[4][0]}); top < 20 {
		t.Fatalf("the run committed only up to %d: too little happened to check anything", top)
	}
}

// Figure 2, State: "nextIndex[]: for each server, index of the next log
// entry to send to that server (initialized to leader last log index + 1);
// matchIndex[]: for each server, index of highest log entry known to be
// replicated on server (initialized to 0, increases monotonically)". (The
// leader then appends its empty entry, §8; Next was set before it.)
func TestFigure2LeaderInitializesNextIndexAndMatchIndex(t *testing.T) {
	p := newPeer(t, 1, three, raft.HardState{}, []uint64{1, 2, 2}, nil) // last index 4
	p.lead(three)
	st := p.status()
	for _, id := range []uint64{2, 3} {
		if pr := st.Progress[id]; pr.Next != 5 || pr.Match != 0 {
			t.Errorf("progress of %d on election: next %d match %d, want next 5 (last index 4 + 1), match 0", id, pr.Next, pr.Match)
		}
	}
	// Match only grows: a stale acknowledgement does not lower it.
	p.step(raft.Message{Type: raft.MsgAppendResponse, From: 2, Term: st.Term, LogIndex: 5})
	p.step(raft.Message{Type: raft.MsgAppendResponse, From: 2, Term: st.Term, LogIndex: 3})
	if pr := p.status().Progress[2]; pr.Match != 5 {
		t.Errorf("match of 2 after acknowledgements of 5 then 3: %d, want 5", pr.Match)
	}
}

// ---- AppendEntries RPC, receiver implementation ----

// Figure 2, AppendEntries receiver 1: "Reply false if term < currentTerm
// (§5.1)." The reply carries the current term, so the stale leader steps
// down; nothing is appended.
func TestFigure2AppendEntriesReceiverRejectsStaleTerm(t *testing.T) {
	p := newPeer(t, 2, three, raft.HardState{Term: 3}, nil, nil)
	msgs := p.step(raft.Message{Type: raft.MsgAppendRequest, From: 1, Term: 2, LogIndex: 1, LogTerm: 1,
		Entries: []raft.Entry{{Index: 2, Term: 2}}})
	if len(msgs) != 1 || msgs[0].Type != raft.MsgAppendResponse || msgs[0].Term != 3 {
		t.Fatalf("stale append answered with %v, want an AppendResponse of term 3", msgs)
	}
	if st := p.status(); st.LastIndex != 1 || st.Term != 3 {
		t.Fatalf("after a stale append: %+v, want the log and term unchanged", st)
	}
	// The stale leader steps down when the answer arrives.
	old := newPeer(t, 1, three, raft.HardState{Term: 1}, nil, nil)
	old.lead(three)
	old.step(msgs[0])
	if st := old.status(); st.Role != raft.Follower || st.Term != 3 {
		t.Fatalf("a leader answered with term 3 is %v at term %d, want follower at 3", st.Role, st.Term)
	}
}

// Figure 2, AppendEntries receiver 2: "Reply false if log doesn't contain
// an entry at prevLogIndex whose term matches prevLogTerm (§5.3)."
func TestFigure2AppendEntriesReceiverRejectsMissingPrevEntry(t *testing.T) {
	tests := []struct {
		prevIndex, prevTerm uint64
		accept              bool
	}{
		{3, 2, true},  // present, term matches
		{3, 3, false}, // present, another term
		{4, 2, false}, // past the end of the log
		{2, 2, true},
		{1, 1, true},
	}
	for _, tt := range tests {
		p := newPeer(t, 2, three, raft.HardState{Term: 2}, []uint64{2, 2}, nil) // 1/1 2/2 3/2
		msgs := p.step(raft.Message{Type: raft.MsgAppendRequest, From: 1, Term: 3, LogIndex: tt.prevIndex, LogTerm: tt.prevTerm,
			Entries: []raft.Entry{{Index: tt.prevIndex + 1, Term: 3}}})
		if len(msgs) != 1 || msgs[0].Reject == tt.accept {
			t.Errorf("prev %d/%d: answered %v, want accepted=%v", tt.prevIndex, tt.prevTerm, msgs, tt.accept)
		}
		if !tt.accept && !slices.Equal(p.terms(), []uint64{1, 2, 2}) {
			t.Errorf("prev %d/%d: a rejected append changed the log to %v", tt.prevIndex, tt.prevTerm, p.terms())
		}
	}
}

// Figure 2, AppendEntries receiver 3: "If an existing entry conflicts with
// a new one (same index but different terms), delete the existing entry
// and all that follow it (§5.3)."
func TestFigure2AppendEntriesReceiverDeletesConflictAndAllThatFollow(t *testing.T) {
	p := newPeer(t, 2, three, raft.HardState{Term: 2}, []uint64{2, 2, 2}, nil) // 1/1 2/2 3/2 4/2
	p.step(raft.Message{Type: raft.MsgAppendRequest, From: 1, Term: 3, LogIndex: 2, LogTerm: 2,
		Entries: []raft.Entry{{Index: 3, Term: 3}}})
	if got := p.terms(); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("log terms %v, want [1 2 3]: entry 3 of term 2 and entry 4 after it deleted", got)
	}
}

// Figure 2, AppendEntries receiver 4: "Append any new entries not already
// in the log." Entries already there are kept, and so are the ones after
// them: a delayed, shorter append does not truncate the log.
func TestFigure2AppendEntriesReceiverAppendsOnlyNewEntries(t *testing.T) {
	p := newPeer(t, 2, three, raft.HardState{Term: 2}, []uint64{2, 2}, nil) // 1/1 2/2 3/2
	p.step(raft.Message{Type: raft.MsgAppendRequest, From: 1, Term: 2, LogIndex: 1, LogTerm: 1,
		Entries: []raft.Entry{{Index: 2, Term: 2, Data: []byte("e2")}}})
	if got := p.terms(); !slices.Equal(got, []uint64{1, 2, 2}) {
		t.Fatalf("after a delayed append of entry 2 only: %v, want [1 2 2]", got)
	}
	p.step(raft.Message{Type: raft.MsgAppendRequest, From: 1, Term: 2, LogIndex: 2, LogTerm: 2,
		Entries: []raft.Entry{{Index: 3, Term: 2, Data: []byte("e3")}, {Index: 4, Term: 2}, {Index: 5, Term: 2}}})
	if got := p.terms(); !slices.Equal(got, []uint64{1, 2, 2, 2, 2}) {
		t.Fatalf("after appending 4 and 5: %v, want [1 2 2 2 2]", got)
	}
}

// Figure 2, AppendEntries receiver 5: "If leaderCommit > commitIndex, set
// commitIndex = min(leaderCommit, index of last new entry)."
func TestFigure2AppendEntriesReceiverCommitsMinOfLeaderCommitAndLastNewEntry(t *testing.T) {
	tests := []struct {
		log          []uint64 // terms of the follower's entries after entry 1
		entries      int      // entries of term 2 appended after entry 1
		leaderCommit uint64
		want         uint64
	}{
		{nil, 2, 9, 3},  // last new entry 3
		{nil, 2, 2, 2},  // the leader's commit
		{nil, 0, 9, 1},  // nothing new: only entry 1 is known to match
		{nil, 3, 0, 1},  // leaderCommit below commitIndex: no change
		{nil, 3, 4, 4},  // both bounds above the old commit
		{nil, 3, 10, 4}, // last new entry 4
		// A log running past the last new entry commits only up to that
		// entry: what follows it may not be the leader's.
		{[]uint64{2, 2, 2, 2}, 1, 5, 2},
	}
	for _, tt := range tests {
		p := newPeer(t, 2, three, raft.HardState{Term: 2}, tt.log, nil)
		var entries []raft.Entry
		for i := range tt.entries {
			entries = append(entries, raft.Entry{Index: uint64(i + 2), Term: 2, Data: fmt.Appendf(nil, "e%d", i+2)})
		}
		p.step(raft.Message{Type: raft.MsgAppendRequest, From: 1, Term: 2, LogIndex: 1, LogTerm: 1, Entries: entries, Commit: tt.leaderCommit})
		if got := p.status().Commit; got != tt.want {
			t.Errorf("log %v, %d new entries, leaderCommit %d: commit %d, want %d", tt.log, tt.entries, tt.leaderCommit, got, tt.want)
		}
	}
}

// ---- RequestVote RPC, receiver implementation ----

// Figure 2, RequestVote receiver 1: "Reply false if term < currentTerm
// (§5.1)." coord grants nothing and does not answer (as etcd): the
// candidate's own election timeout moves it on, and it learns the newer
// term from the next leader.
func TestFigure2RequestVoteReceiverRefusesStaleTerm(t *testing.T) {
	p := newPeer(t, 2, three, raft.HardState{Term: 3}, nil, nil)
	msgs := p.step(raft.Message{Type: raft.MsgVoteRequest, From: 1, Term: 2, LogIndex: 9, LogTerm: 2})
	if len(ofType(msgs, raft.MsgVoteResponse)) != 0 {
		t.Fatalf("stale vote request answered with %v, want no vote", msgs)
	}
	if st := p.status(); st.Term != 3 || st.Vote != 0 {
		t.Fatalf("after a stale vote request: term %d vote %d, want 3 and none", st.Term, st.Vote)
	}
}

// Figure 2, RequestVote receiver 2: "If votedFor is null or candidateId,
// and candidate's log is at least as up-to-date as receiver's log, grant
// vote (§5.2, §5.4)." §5.4.1: "If the logs have last entries with
// different terms, then the log with the later term is more up-to-date.
// If the logs end with the same term, then whichever log is longer is more
// up-to-date."
func TestFigure2RequestVoteReceiverGrantsOnlyOnceAndOnlyToUpToDateLogs(t *testing.T) {
	// The voter's log ends at 3/2.
	tests := []struct {
		votedFor            uint64
		lastIndex, lastTerm uint64
		grant               bool
	}{
		{0, 3, 2, true},  // same last entry
		{0, 4, 2, true},  // same term, longer
		{0, 2, 2, false}, // same term, shorter
		{0, 1, 3, true},  // later term, shorter
		{0, 9, 1, false}, // earlier term, longer
		{1, 3, 2, true},  // voted for this candidate already: again
		{3, 3, 2, false}, // voted for another in this term
		{3, 9, 3, false}, // ... however up-to-date the candidate
	}
	for _, tt := range tests {
		p := newPeer(t, 2, three, raft.HardState{Term: 4, Vote: tt.votedFor}, []uint64{2, 2}, nil)
		msgs := p.step(raft.Message{Type: raft.MsgVoteRequest, From: 1, Term: 4, LogIndex: tt.lastIndex, LogTerm: tt.lastTerm})
		if len(msgs) != 1 || msgs[0].Type != raft.MsgVoteResponse || msgs[0].Reject == tt.grant {
			t.Errorf("votedFor %d, candidate's last %d/%d: %v, want granted=%v", tt.votedFor, tt.lastIndex, tt.lastTerm, msgs, tt.grant)
		}
		wantVote := tt.votedFor
		if tt.grant {
			wantVote = 1
		}
		if st := p.status(); st.Vote != wantVote {
			t.Errorf("votedFor %d, candidate's last %d/%d: vote is now %d, want %d", tt.votedFor, tt.lastIndex, tt.lastTerm, st.Vote, wantVote)
		}
	}
}

// §5.4.1, the election restriction, in a cluster: "a candidate must
// contact a majority of the cluster in order to be elected, which means
// that every committed entry must be present in at least one of those
// servers." A node that missed a committed entry cannot win; one that has
// it can.
func TestFigure2ElectionRestrictionKeepsCommittedEntries(t *testing.T) {
	n := cluster(t, 1, 2, 3)
	leader := elect(t, n, 1)
	n.Isolate(3)
	index, _, err := leader.Core.Propose([]byte("committed"))
	if err != nil {
		t.Fatal(err)
	}
	mustStabilize(t, n)
	if st := leader.Core.Status(); st.Commit < index {
		t.Fatalf("entry %d not committed by 1 and 2: %+v", index, st)
	}
	if err := n.Crash(1); err != nil {
		t.Fatal(err)
	}
	n.Heal()
	behind := mustNode(t, n, 3)
	for range 3 {
		behind.Core.Campaign()
		mustStabilize(t, n)
		if st := behind.Core.Status(); st.Role == raft.Leader {
			t.Fatalf("node 3 lacks committed entry %d and still won term %d", index, st.Term)
		}
	}
	winner := elect(t, n, 2)
	mustStabilize(t, n)
	if got := string(winner.Applied[index]); got != "committed" {
		t.Fatalf("the new leader applied %q at %d, want the committed entry", got, index)
	}
	if err := n.Check(); err != nil {
		t.Fatal(err)
	}
}

// ---- Rules for Servers: all servers ----

// Figure 2, All Servers: "If commitIndex > lastApplied: increment
// lastApplied, apply log[lastApplied] to state machine (§5.3)." The
// entries come out in a Ready's CommittedEntries, in order, each once,
// exactly up to the commit index.
func TestFigure2AllServersApplyCommittedEntriesInOrder(t *testing.T) {
	p := newPeer(t, 2, three, raft.HardState{Term: 2}, []uint64{2, 2, 2, 2}, nil) // last 5, commit 1
	p.applied = nil
	for _, commit := range []uint64{3, 3, 5} {
		p.step(raft.Message{Type: raft.MsgHeartbeatRequest, From: 1, Term: 2, Commit: commit})
		if st := p.status(); st.Applied != commit {
			t.Fatalf("commit %d: applied %d", commit, st.Applied)
		}
	}
	var indexes []uint64
	for _, e := range p.applied {
		indexes = append(indexes, e.Index)
	}
	if !slices.Equal(indexes, []uint64{2, 3, 4, 5}) {
		t.Fatalf("applied %v, want [2 3 4 5], in order, once each", indexes)
	}
}

// Figure 2, All Servers: "If RPC request or response contains term T >
// currentTerm: set currentTerm = T, convert to follower (§5.1)." For every
// role, and every request and response. (Two exceptions, both §9.6
// pre-vote, are in TestFigure2PreVoteDoesNotChangeTerms; a TimeoutNow of a
// later term makes the follower campaign at once, §3.10.)
func TestFigure2AllServersStepDownOnLaterTerm(t *testing.T) {
	types := []raft.MessageType{raft.MsgAppendRequest, raft.MsgHeartbeatRequest, raft.MsgSnapshotRequest,
		raft.MsgVoteRequest, raft.MsgVoteResponse, raft.MsgAppendResponse, raft.MsgHeartbeatResponse, raft.MsgSnapshotResponse}
	roles := map[raft.Role]func(*peer){
		raft.Follower:  func(*peer) {},
		raft.Candidate: func(p *peer) { p.core.Campaign(); p.flush() },
		raft.Leader:    func(p *peer) { p.lead(three) },
	}
	for role, become := range roles {
		for _, typ := range types {
			p := newPeer(t, 1, three, raft.HardState{Term: 2}, nil, nil)
			become(p)
			if st := p.status(); st.Role != role {
				t.Fatalf("set-up: node is %v, want %v", st.Role, role)
			}
			later := p.status().Term + 3
			p.step(raft.Message{Type: typ, From: 2, Term: later, LogIndex: 1, LogTerm: 1})
			if st := p.status(); st.Term != later || st.Role != raft.Follower {
				t.Errorf("%v receiving %v of term %d: now %v at term %d, want follower at %d", role, typ, later, st.Role, st.Term, later)
			}
		}
	}
}

// ---- Rules for Servers: followers ----

// Figure 2, Followers: "Respond to RPCs from candidates and leaders."
func TestFigure2FollowersRespondToCandidatesAndLeaders(t *testing.T) {
	requests := map[raft.MessageType]raft.MessageType{
		raft.MsgVoteRequest:      raft.MsgVoteResponse,
		raft.MsgAppendRequest:    raft.MsgAppendResponse,
		raft.MsgHeartbeatRequest: raft.MsgHeartbeatResponse,
		raft.MsgSnapshotRequest:  raft.MsgSnapshotResponse,
	}
	for req, resp := range requests {
		p := newPeer(t, 2, three, raft.HardState{Term: 2}, nil, nil)
		msgs := p.step(raft.Message{Type: req, From: 1, Term: 2, LogIndex: 1, LogTerm: 1})
		if len(msgs) != 1 || msgs[0].Type != resp || msgs[0].To != 1 {
			t.Errorf("%v answered with %v, want one %v to 1", req, msgs, resp)
		}
	}
}

// electionTicks returns after how many ticks p stops being a follower, or
// limit.
func electionTicks(p *peer, limit int) int {
	for i := 1; i <= limit; i++ {
		p.tick(1)
		if p.status().Role != raft.Follower {
			return i
		}
	}
	return limit
}

// Figure 2, Followers: "If election timeout elapses without receiving
// AppendEntries RPC from current leader or granting vote to candidate:
// convert to candidate." §5.2: "Raft uses randomized election timeouts
// ... chosen randomly from a fixed interval"; coord draws them from
// [ElectionTicks, 2*ElectionTicks).
func TestFigure2FollowersBecomeCandidatesAfterARandomizedTimeout(t *testing.T) {
	const election = 10
	seen := map[int]bool{}
	for seed := range uint64(100) {
		p := newPeer(t, 2, three, raft.HardState{Term: 2}, nil, func(c *raft.Config) { c.Rand = rand.New(rand.NewPCG(seed, 3)) })
		ticks := electionTicks(p, 3*election)
		if ticks < election || ticks >= 2*election {
			t.Fatalf("seed %d: election after %d ticks, want in [%d, %d)", seed, ticks, election, 2*election)
		}
		if st := p.status(); st.Role != raft.Candidate || st.Term != 3 {
			t.Fatalf("seed %d: after the timeout %v at term %d, want candidate at 3", seed, st.Role, st.Term)
		}
		seen[ticks] = true
	}
	if len(seen) < election/2 {
		t.Fatalf("100 seeds drew only %d distinct timeouts: %v", len(seen), seen)
	}
}

// ... "without receiving AppendEntries RPC from current leader or granting
// vote to candidate": both restart the timeout.
func TestFigure2FollowersTimeoutRestartsOnAppendsAndGrantedVotes(t *testing.T) {
	const election = 10
	restart := map[string]func(p *peer, round int){
		"append from the leader": func(p *peer, _ int) {
			p.step(raft.Message{Type: raft.MsgHeartbeatRequest, From: 1, Term: 2})
		},
		"vote granted": func(p *peer, _ int) {
			// The same candidate asks again (its request was lost, say),
			// in the same term: no term change resets anything, only the
			// vote granted again does.
			msgs := p.step(raft.Message{Type: raft.MsgVoteRequest, From: 3, Term: 3, LogIndex: 1, LogTerm: 1})
			if len(msgs) != 1 || msgs[0].Reject {
				p.t.Fatalf("vote not granted: %v", msgs)
			}
		},
	}
	for name, f := range restart {
		p := newPeer(t, 2, three, raft.HardState{Term: 2}, nil, nil)
		for round := range 6 {
			p.tick(election - 1)
			f(p, round)
		}
		if st := p.status(); st.Role != raft.Follower {
			t.Errorf("%s every %d ticks: the follower became %v", name, election-1, st.Role)
		}
		if ticks := electionTicks(p, 3*election); ticks < election {
			t.Errorf("%s: once it stopped, the election came after %d ticks", name, ticks)
		}
	}
}

// ---- Rules for Servers: candidates ----

// Figure 2, Candidates: "On conversion to candidate, start election:
// Increment currentTerm; Vote for self; Reset election timer; Send
// RequestVote RPCs to all other servers." (To the other voters: learners
// do not vote.)
func TestFigure2CandidatesStartAnElection(t *testing.T) {
	voters := []uint64{1, 2, 3, 4, 5}
	p := newPeer(t, 1, voters, raft.HardState{Term: 4}, []uint64{3, 4}, nil) // last 3/4
	electionTicks(p, 30)
	st := p.status()
	if st.Role != raft.Candidate || st.Term != 5 || st.Vote != 1 {
		t.Fatalf("after the timeout: %v term %d vote %d, want candidate at 5 voting for itself", st.Role, st.Term, st.Vote)
	}
	var reqs []raft.Message
	for _, rd := range p.readies {
		reqs = append(reqs, ofType(rd.Messages, raft.MsgVoteRequest)...)
	}
	var to []uint64
	for _, m := range reqs {
		to = append(to, m.To)
		if m.Term != 5 || m.LogIndex != 3 || m.LogTerm != 4 {
			t.Errorf("vote request %v, want term 5 with last entry 3/4", m)
		}
	}
	slices.Sort(to)
	if !slices.Equal(to, []uint64{2, 3, 4, 5}) {
		t.Errorf("vote requests to %v, want every other voter", to)
	}
	// The timer was reset: the next election is a whole timeout away.
	if ticks := electionTicks2(p, 30); ticks < 10 {
		t.Errorf("the candidate started its next election after %d ticks, want at least ElectionTicks 10", ticks)
	}
}

// electionTicks2 returns after how many ticks a candidate starts its next
// election (its term grows), or limit.
func electionTicks2(p *peer, limit int) int {
	term := p.status().Term
	for i := 1; i <= limit; i++ {
		p.tick(1)
		if p.status().Term != term {
			return i
		}
	}
	return limit
}

// Figure 2, Candidates: "If votes received from majority of servers:
// become leader." A minority leaves it a candidate; coord also returns a
// candidate to follower once a majority refused (nothing is left to wait
// for).
func TestFigure2CandidatesWinWithAMajority(t *testing.T) {
	voters := []uint64{1, 2, 3, 4, 5}
	tests := []struct {
		granted, refused []uint64
		want             raft.Role
	}{
		{[]uint64{2}, nil, raft.Candidate},
		{[]uint64{2, 3}, nil, raft.Leader}, // with its own: 3 of 5
		{[]uint64{2}, []uint64{3, 4}, raft.Candidate},
		{[]uint64{2}, []uint64{3, 4, 5}, raft.Follower},
		{nil, []uint64{2, 3, 4}, raft.Follower},
	}
	for _, tt := range tests {
		p := newPeer(t, 1, voters, raft.HardState{Term: 1}, nil, nil)
		p.core.Campaign()
		p.flush()
		for _, id := range tt.granted {
			p.step(raft.Message{Type: raft.MsgVoteResponse, From: id, Term: 2})
		}
		for _, id := range tt.refused {
			p.step(raft.Message{Type: raft.MsgVoteResponse, From: id, Term: 2, Reject: true})
		}
		if st := p.status(); st.Role != tt.want {
			t.Errorf("granted by %v, refused by %v: %v, want %v", tt.granted, tt.refused, st.Role, tt.want)
		}
	}
}

// Figure 2, Candidates: "If AppendEntries RPC received from new leader:
// convert to follower." (A heartbeat or a snapshot from the leader of the
// candidate's term too.)
func TestFigure2CandidatesFollowANewLeaderOfTheirTerm(t *testing.T) {
	for _, typ := range []raft.MessageType{raft.MsgAppendRequest, raft.MsgHeartbeatRequest, raft.MsgSnapshotRequest} {
		p := newPeer(t, 1, three, raft.HardState{Term: 1}, nil, nil)
		p.core.Campaign()
		p.flush()
		p.step(raft.Message{Type: typ, From: 2, Term: 2, LogIndex: 1, LogTerm: 1})
		if st := p.status(); st.Role != raft.Follower || st.Term != 2 || st.Lead != 2 {
			t.Errorf("candidate of term 2 receiving %v from 2: %v term %d lead %d, want follower of 2 in term 2", typ, st.Role, st.Term, st.Lead)
		}
	}
}

// Figure 2, Candidates: "If election timeout elapses: start new election."
func TestFigure2CandidatesStartANewElectionAfterATimeout(t *testing.T) {
	p := newPeer(t, 1, three, raft.HardState{Term: 1}, nil, nil)
	p.core.Campaign()
	p.flush()
	if ticks := electionTicks2(p, 30); ticks >= 30 {
		t.Fatal("the candidate never started a new election")
	}
	if st := p.status(); st.Role != raft.Candidate || st.Term != 3 || st.Vote != 1 {
		t.Fatalf("after a split vote's timeout: %v term %d vote %d, want candidate at 3", st.Role, st.Term, st.Vote)
	}
}

// ---- Rules for Servers: leaders ----

// Figure 2, Leaders: "Upon election: send initial empty AppendEntries RPCs
// (heartbeat) to each server; repeat during idle periods to prevent
// election timeouts (§5.2)." coord's first append carries the empty entry
// of the new term (§8) rather than nothing; then heartbeats every
// HeartbeatTicks while idle.
func TestFigure2LeadersAssertLeadershipOnElectionAndWhileIdle(t *testing.T) {
	p := newPeer(t, 1, three, raft.HardState{Term: 1}, []uint64{1}, nil) // last 2/1
	msgs := p.lead(three)
	appends := ofType(msgs, raft.MsgAppendRequest)
	if len(appends) != 2 {
		t.Fatalf("on election: %v, want an append to each of 2 and 3", msgs)
	}
	for _, m := range appends {
		if m.LogIndex != 2 || m.LogTerm != 1 || len(m.Entries) != 1 || m.Entries[0].Term != 2 || len(m.Entries[0].Data) != 0 {
			t.Errorf("first append %v, want prev 2/1 and the empty entry 3/2", m)
		}
	}
	// Idle: heartbeats each HeartbeatTicks (1 by default), to each follower.
	for tick := range 5 {
		hb := ofType(p.tick(1), raft.MsgHeartbeatRequest)
		if len(hb) != 2 || hb[0].To == hb[1].To {
			t.Fatalf("idle tick %d: heartbeats %v, want one to each follower", tick, hb)
		}
	}
}

// Figure 2, Leaders: "If command received from client: append entry to
// local log, respond after entry applied to state machine (§5.3)." The
// core appends and persists the entry, and hands it to be applied only
// once committed; node.Propose answers after the apply (node's
// TestReplicateAndRead).
func TestFigure2LeadersAppendCommandsAndApplyThemOnceCommitted(t *testing.T) {
	p := newPeer(t, 1, three, raft.HardState{Term: 1}, nil, nil)
	p.lead(three)
	term := p.status().Term
	p.step(raft.Message{Type: raft.MsgAppendResponse, From: 2, Term: term, LogIndex: 2}) // the empty entry commits
	p.applied = nil
	index, _, err := p.core.Propose([]byte("cmd"))
	if err != nil {
		t.Fatal(err)
	}
	p.flush()
	rd := p.readies[len(p.readies)-1]
	if len(rd.Entries) != 1 || rd.Entries[0].Index != index || string(rd.Entries[0].Data) != "cmd" {
		t.Fatalf("the Ready after the proposal persists %v, want entry %d", rd.Entries, index)
	}
	if len(p.applied) != 0 {
		t.Fatalf("applied %v before any follower has the entry", p.applied)
	}
	p.step(raft.Message{Type: raft.MsgAppendResponse, From: 3, Term: term, LogIndex: index})
	if len(p.applied) != 1 || string(p.applied[0].Data) != "cmd" {
		t.Fatalf("applied %v once a majority holds it, want the command", p.applied)
	}
}

// Figure 2, Leaders: "If last log index ≥ nextIndex for a follower: send
// AppendEntries RPC with log entries starting at nextIndex. If successful:
// update nextIndex and matchIndex for follower (§5.3). If AppendEntries
// fails because of log inconsistency: decrement nextIndex and retry
// (§5.3)." The paper's Figure 7: a leader of term 8 brings each of the
// followers (a) to (f) to its own log. coord decrements by the follower's
// hint, so a retry may skip several entries at once; each retry starts
// lower than the rejected one.
func TestFigure2LeadersBringFollowerLogsToTheirOwn(t *testing.T) {
	leaderLog := []uint64{1, 1, 4, 4, 5, 5, 6, 6, 6} // after entry 1 (term 1): the paper's top row
	followers := map[string][]uint64{
		"a": {1, 1, 4, 4, 5, 5, 6, 6},
		"b": {1, 1, 4},
		"c": {1, 1, 4, 4, 5, 5, 6, 6, 6, 6},
		"d": {1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7},
		"e": {1, 1, 4, 4, 4, 4},
		"f": {1, 1, 2, 2, 2, 3, 3, 3, 3, 3},
	}
	rejections := 0
	for name, flog := range followers {
		leader := newPeer(t, 1, three, raft.HardState{Term: 7}, leaderLog, nil)
		follower := newPeer(t, 2, three, raft.HardState{Term: 7}, flog, nil)
		msgs := leader.lead(three) // term 8, with a vote from 3
		term := leader.status().Term
		for round := 0; len(msgs) > 0; round++ {
			if round > 50 {
				t.Fatalf("(%s): still exchanging after 50 rounds", name)
			}
			var next []raft.Message
			for _, m := range msgs {
				if m.To != 2 {
					continue
				}
				for _, resp := range follower.step(m) {
					out := leader.step(resp)
					if resp.Reject {
						rejections++
						for _, retry := range ofType(out, raft.MsgAppendRequest) {
							if retry.To == 2 && retry.LogIndex >= resp.LogIndex {
								t.Errorf("(%s): after rejecting prev %d, the retry starts at prev %d", name, resp.LogIndex, retry.LogIndex)
							}
						}
					}
					next = append(next, out...)
				}
			}
			msgs = next
		}
		want := append(append([]uint64{1}, leaderLog...), term)
		if got := follower.terms(); !slices.Equal(got, want) {
			t.Errorf("(%s): follower's log %v, want the leader's %v", name, got, want)
		}
		last := leader.status().LastIndex
		if pr := leader.status().Progress[2]; pr.Match != last || pr.Next != last+1 {
			t.Errorf("(%s): progress match %d next %d, want %d and %d", name, pr.Match, pr.Next, last, last+1)
		}
	}
	if rejections == 0 {
		t.Fatal("no follower rejected an append: the retry rule went unchecked")
	}
}

// Figure 2, Leaders: "If there exists an N such that N > commitIndex, a
// majority of matchIndex[i] ≥ N, and log[N].term == currentTerm: set
// commitIndex = N (§5.3, §5.4)." §5.4.2: "Raft never commits log entries
// from previous terms by counting replicas. Only log entries from the
// leader's current term are committed by counting replicas; once an entry
// from the current term has been committed in this way, then all prior
// entries are committed indirectly."
func TestFigure2LeadersCommitByMajorityOnlyEntriesOfTheirTerm(t *testing.T) {
	voters := []uint64{1, 2, 3, 4, 5}
	// Entry 2 is of term 2, uncommitted; the leader is elected in term 3
	// and appends its empty entry at 3.
	p := newPeer(t, 1, voters, raft.HardState{Term: 2}, []uint64{2}, nil)
	p.lead(voters)
	term := p.status().Term
	ack := func(from, index uint64) {
		p.step(raft.Message{Type: raft.MsgAppendResponse, From: from, Term: term, LogIndex: index})
	}
	ack(2, 2)
	ack(3, 2)
	if c := p.status().Commit; c != 1 {
		t.Fatalf("entry 2 of term 2 on 3 of 5 voters: commit %d, want 1 (not by counting replicas of an old term)", c)
	}
	ack(2, 3)
	if c := p.status().Commit; c != 1 {
		t.Fatalf("entry 3 of term %d on 2 of 5 voters: commit %d, want 1", term, c)
	}
	ack(4, 3)
	if c := p.status().Commit; c != 3 {
		t.Fatalf("entry 3 of term %d on 3 of 5 voters: commit %d, want 3, with entry 2 committed indirectly", term, c)
	}
}

// ---- §6, cluster membership changes ----

// §6: "a server always uses the latest configuration in its log,
// regardless of whether the entry is committed." A follower uses a new
// configuration as soon as its entry is appended, and (dissertation §4.1)
// goes back to the previous one if the entry is truncated.
func TestSection6ConfigurationTakesEffectWhenAppendedAndRollsBack(t *testing.T) {
	p := newPeer(t, 2, three, raft.HardState{Term: 2}, []uint64{2}, nil) // 1/1 2/2
	cc := raft.ConfChange{Changes: []raft.ConfChangeSingle{{Type: raft.ConfChangeAddLearner, NodeID: 4}}}
	p.step(raft.Message{Type: raft.MsgAppendRequest, From: 1, Term: 2, LogIndex: 2, LogTerm: 2, Commit: 2,
		Entries: []raft.Entry{{Index: 3, Term: 2, Type: raft.EntryConfChange, Data: cc.Marshal()}}})
	if st := p.status(); !st.Conf.IsLearner(4) || st.Commit != 2 {
		t.Fatalf("with the change appended and not committed: %v (commit %d), want learner 4 in force", st.Conf, st.Commit)
	}
	// A new leader of term 3 replaces entry 3.
	p.step(raft.Message{Type: raft.MsgAppendRequest, From: 3, Term: 3, LogIndex: 2, LogTerm: 2, Commit: 2,
		Entries: []raft.Entry{{Index: 3, Term: 3}}})
	if st := p.status(); st.Conf.IsLearner(4) || !slices.Equal(st.Conf.Voters, three) {
		t.Fatalf("with the change truncated: %v, want voters (1 2 3) again", st.Conf)
	}
}

// §6: "servers disregard RequestVote RPCs when they believe a current
// leader exists. Specifically, if a server receives a RequestVote RPC
// within the minimum election timeout of hearing from a current leader, it
// does not update its term or grant its vote." coord does this with
// CheckQuorum; a leadership transfer's request is exempt (§3.10).
func TestSection6ServersDisregardVoteRequestsWhileTheyHearALeader(t *testing.T) {
	p := newPeer(t, 2, three, raft.HardState{Term: 2}, nil, func(c *raft.Config) { c.CheckQuorum = true })
	p.step(raft.Message{Type: raft.MsgHeartbeatRequest, From: 1, Term: 2})
	p.tick(5)
	if msgs := p.step(raft.Message{Type: raft.MsgVoteRequest, From: 3, Term: 3, LogIndex: 1, LogTerm: 1}); len(msgs) != 0 {
		t.Fatalf("within the leader's timeout a vote request got %v, want nothing", msgs)
	}
	if st := p.status(); st.Term != 2 || st.Vote != 0 {
		t.Fatalf("the disregarded request changed term %d / vote %d", st.Term, st.Vote)
	}
	if msgs := p.step(raft.Message{Type: raft.MsgVoteRequest, From: 3, Term: 3, LogIndex: 1, LogTerm: 1, Transfer: true}); len(msgs) != 1 || msgs[0].Reject {
		t.Fatalf("a transfer's vote request got %v, want a granted vote", msgs)
	}
	q := newPeer(t, 2, three, raft.HardState{Term: 2}, nil, func(c *raft.Config) { c.CheckQuorum = true })
	q.step(raft.Message{Type: raft.MsgHeartbeatRequest, From: 1, Term: 2})
	q.tick(10) // the minimum election timeout without the leader
	if msgs := q.step(raft.Message{Type: raft.MsgVoteRequest, From: 3, Term: 3, LogIndex: 1, LogTerm: 1}); len(msgs) != 1 || msgs[0].Reject {
		t.Fatalf("after the timeout a vote request got %v, want a granted vote", msgs)
	}
}

// ---- §7, log compaction: InstallSnapshot, receiver implementation ----

func snapshotMessage(index, term uint64) raft.Message {
	return raft.Message{Type: raft.MsgSnapshotRequest, From: 1, Term: 3, Snapshot: raft.Snapshot{
		Metadata: raft.SnapshotMetadata{Index: index, Term: term, ConfState: raft.ConfState{Voters: []uint64{1, 2, 3, 4}}},
		Data:     []byte("state"),
	}}
}

// Figure 13, InstallSnapshot receiver 1: "Reply immediately if term <
// currentTerm." coord ignores a stale snapshot (the stale leader learns
// the term from the answers to its appends and heartbeats); nothing is
// installed either way.
func TestSection7InstallSnapshotReceiverIgnoresStaleTerm(t *testing.T) {
	p := newPeer(t, 2, three, raft.HardState{Term: 4}, []uint64{2}, nil)
	p.step(snapshotMessage(9, 3))
	if st := p.status(); st.LastIndex != 2 || st.Term != 4 || st.Commit != 1 {
		t.Fatalf("a stale snapshot changed the node: %+v", st)
	}
	for _, rd := range p.readies {
		if !rd.Snapshot.IsEmpty() {
			t.Fatalf("a stale snapshot was installed: %+v", rd.Snapshot.Metadata)
		}
	}
}

// Figure 13, InstallSnapshot receiver 6: "If existing log entry has same
// index and term as snapshot's last included entry, retain log entries
// following it and reply."
func TestSection7InstallSnapshotReceiverKeepsEntriesAfterAMatch(t *testing.T) {
	p := newPeer(t, 2, three, raft.HardState{Term: 3}, []uint64{2, 3, 3, 3}, nil) // last 5/3
	msgs := p.step(snapshotMessage(4, 3))
	if got := p.terms(); !slices.Equal(got, []uint64{1, 2, 3, 3, 3}) {
		t.Fatalf("log %v after a snapshot of an entry it has, want it kept", got)
	}
	if st := p.status(); st.Commit != 4 {
		t.Fatalf("commit %d, want 4: the snapshot's entries are committed", st.Commit)
	}
	if len(msgs) != 1 || msgs[0].Type != raft.MsgSnapshotResponse || msgs[0].LogIndex != 4 {
		t.Fatalf("answered %v, want a SnapshotResponse at 4", msgs)
	}
}

// Figure 13, InstallSnapshot receiver 7 and 8: "Discard the entire log.
// Reset state machine using snapshot contents (and load snapshot's cluster
// configuration)."
func TestSection7InstallSnapshotReceiverReplacesTheLog(t *testing.T) {
	// Entry 9 is of term 2, the snapshot's last entry 9/3: the log
	// conflicts, even though it is longer than the snapshot.
	p := newPeer(t, 2, three, raft.HardState{Term: 3}, []uint64{2, 2, 2, 2, 2, 2, 2, 2, 2, 2}, nil) // last 11/2
	msgs := p.step(snapshotMessage(9, 3))
	var installed raft.Snapshot
	for _, rd := range p.readies {
		if !rd.Snapshot.IsEmpty() {
			installed = rd.Snapshot
		}
	}
	if installed.Metadata.Index != 9 || string(installed.Data) != "state" {
		t.Fatalf("no snapshot handed to the application: %+v", installed.Metadata)
	}
	st := p.status()
	if st.LastIndex != 9 || st.Commit != 9 || !slices.Equal(st.Conf.Voters, []uint64{1, 2, 3, 4}) {
		t.Fatalf("after installing: last %d commit %d conf %v, want 9, 9 and the snapshot's voters (1 2 3 4)", st.LastIndex, st.Commit, st.Conf)
	}
	if first, _ := p.storage.FirstIndex(); first != 10 {
		t.Fatalf("storage's first index %d, want 10: the old log discarded", first)
	}
	if len(msgs) != 1 || msgs[0].LogIndex != 9 {
		t.Fatalf("answered %v, want a SnapshotResponse at 9", msgs)
	}
}

// ---- §8, client interaction ----

// §8: "a leader must check whether it has been deposed before processing
// a read-only request ... by having the leader exchange heartbeat messages
// with a majority of the cluster before responding", and first "commit a
// blank no-op entry at the start of its term". A ReadIndex is confirmed
// only after the empty entry commits and a majority answers a heartbeat
// sent after the read.
func TestSection8ReadsWaitForTheTermsFirstCommitAndAHeartbeatQuorum(t *testing.T) {
	voters := []uint64{1, 2, 3, 4, 5}
	p := newPeer(t, 1, voters, raft.HardState{Term: 1}, nil, nil)
	p.lead(voters)
	term := p.status().Term
	confirmed := func() []raft.ReadState {
		var rs []raft.ReadState
		for _, rd := range p.readies {
			rs = append(rs, rd.ReadStates...)
		}
		return rs
	}
	if err := p.core.ReadIndex(7); err != nil {
		t.Fatal(err)
	}
	p.flush()
	for _, from := range []uint64{2, 3} {
		p.step(raft.Message{Type: raft.MsgHeartbeatResponse, From: from, Term: term})
	}
	if rs := confirmed(); len(rs) != 0 {
		t.Fatalf("read confirmed %v before the term's first entry committed", rs)
	}
	var round uint64
	for _, from := range []uint64{2, 3} {
		for _, m := range p.step(raft.Message{Type: raft.MsgAppendResponse, From: from, Term: term, LogIndex: 2}) {
			if m.Type == raft.MsgHeartbeatRequest {
				round = m.ReadRound
			}
		}
	}
	if round == 0 {
		t.Fatalf("no heartbeat round started for the read once the empty entry committed")
	}
	p.step(raft.Message{Type: raft.MsgHeartbeatResponse, From: 2, Term: term, ReadRound: round})
	if rs := confirmed(); len(rs) != 0 {
		t.Fatalf("read confirmed %v with 2 of 5 acknowledgements", rs)
	}
	p.step(raft.Message{Type: raft.MsgHeartbeatResponse, From: 3, Term: term, ReadRound: round})
	if rs := confirmed(); len(rs) != 1 || rs[0].ID != 7 || rs[0].Index != 2 {
		t.Fatalf("with 3 of 5 acknowledgements: %v, want read 7 at index 2", rs)
	}
}

// ---- §9.6, pre-vote (dissertation) ----

// The two exceptions to "If RPC request or response contains term T >
// currentTerm: set currentTerm = T": a pre-vote request carries the term
// the candidate would campaign in, and a granted pre-vote response echoes
// it; neither changes anyone's term (dissertation §9.6).
func TestFigure2PreVoteDoesNotChangeTerms(t *testing.T) {
	p := newPeer(t, 2, three, raft.HardState{Term: 2}, nil, func(c *raft.Config) { c.PreVote = true })
	msgs := p.step(raft.Message{Type: raft.MsgPreVoteRequest, From: 1, Term: 3, LogIndex: 1, LogTerm: 1})
	if len(msgs) != 1 || msgs[0].Reject || msgs[0].Term != 3 {
		t.Fatalf("pre-vote answered %v, want granted for term 3", msgs)
	}
	if st := p.status(); st.Term != 2 || st.Vote != 0 {
		t.Fatalf("answering a pre-vote changed term %d / vote %d", st.Term, st.Vote)
	}
	c := newPeer(t, 1, three, raft.HardState{Term: 2}, nil, func(c *raft.Config) { c.PreVote = true })
	c.core.Campaign()
	c.flush()
	if st := c.status(); st.Role != raft.PreCandidate || st.Term != 2 {
		t.Fatalf("campaigning with pre-vote: %v at term %d, want pre-candidate at 2", st.Role, st.Term)
	}
	c.step(raft.Message{Type: raft.MsgPreVoteResponse, From: 2, Term: 3})
	if st := c.status(); st.Role != raft.Candidate || st.Term != 3 {
		t.Fatalf("with a pre-vote majority: %v at term %d, want candidate at 3", st.Role, st.Term)
	}
}

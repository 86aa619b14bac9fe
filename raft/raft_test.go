package raft_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"coord/raft"
	"coord/raft/rafttest"
)

func cluster(t *testing.T, ids ...uint64) *rafttest.Network {
	t.Helper()
	n := rafttest.NewNetwork()
	if err := n.Bootstrap(ids...); err != nil {
		t.Fatal(err)
	}
	return n
}

func mustStabilize(t *testing.T, n *rafttest.Network) {
	t.Helper()
	if err := n.Stabilize(1000); err != nil {
		t.Fatal(err)
	}
}

func elect(t *testing.T, n *rafttest.Network, id uint64) *rafttest.Node {
	t.Helper()
	node, err := n.Node(id)
	if err != nil {
		t.Fatal(err)
	}
	node.Core.Campaign()
	mustStabilize(t, n)
	if st := node.Core.Status(); st.Role != raft.Leader {
		t.Fatalf("node %d did not become leader: %v", id, st.Role)
	}
	return node
}

// sent collects the messages a node's Ready carries, and advances.
func sent(t *testing.T, c *raft.Core, s *raft.MemoryStorage) []raft.Message {
	t.Helper()
	var msgs []raft.Message
	for c.HasReady() {
		rd := c.Ready()
		if !rd.HardState.IsEmpty() {
			_ = s.SetHardState(rd.HardState)
		}
		_ = s.Append(rd.Entries)
		msgs = append(msgs, rd.Messages...)
		c.Advance(rd)
	}
	return msgs
}

func newCore(t *testing.T, id uint64, s *raft.MemoryStorage, peers ...uint64) *raft.Core {
	t.Helper()
	cfg := rafttest.DefaultConfig(id)
	cfg.Storage = s
	cfg.Peers = peers
	c, err := raft.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// One vote per term, and the vote survives a restart because the Ready
// that carries the response also carries the HardState to persist first.
func TestVoteOncePerTermSurvivesRestart(t *testing.T) {
	s := raft.NewMemoryStorage()
	c := newCore(t, 3, s, 1, 2, 3)
	sent(t, c, s)
	vote := func(c *raft.Core, from uint64) raft.Message {
		t.Helper()
		if err := c.Step(raft.Message{Type: raft.MsgVoteRequest, From: from, To: 3, Term: 2, LogIndex: 1, LogTerm: 1}); err != nil {
			t.Fatal(err)
		}
		msgs := sent(t, c, s)
		if len(msgs) != 1 || msgs[0].Type != raft.MsgVoteResponse {
			t.Fatalf("want one vote response, got %v", msgs)
		}
		return msgs[0]
	}
	if m := vote(c, 1); m.Reject {
		t.Fatalf("first vote in term 2 refused: %v", m)
	}
	if m := vote(c, 2); !m.Reject {
		t.Fatalf("second candidate in term 2 got a vote too: %v", m)
	}
	if hs := s.HardState(); hs.Term != 2 || hs.Vote != 1 {
		t.Fatalf("persisted hard state %+v, want term 2 vote 1", hs)
	}
	restarted := newCore(t, 3, s)
	if m := vote(restarted, 2); !m.Reject {
		t.Fatalf("after a restart, node voted again in term 2: %v", m)
	}
	if m := vote(restarted, 1); m.Reject {
		t.Fatalf("after a restart, node refused the candidate it voted for: %v", m)
	}
}

// A vote goes only to a candidate whose log is at least as up-to-date as
// the voter's, compared by last term, then last index (§5.4.1).
func TestVoteRequiresUpToDateLog(t *testing.T) {
	s := raft.NewMemoryStorage()
	_ = s.Append([]raft.Entry{{Index: 1, Term: 1}, {Index: 2, Term: 3}, {Index: 3, Term: 3}})
	_ = s.SetHardState(raft.HardState{Term: 3, Commit: 1})
	c := newCore(t, 3, s)
	tests := []struct {
		lastIndex, lastTerm uint64
		granted             bool
	}{
		{3, 2, false}, {2, 3, false}, {3, 3, true}, {1, 4, true},
	}
	for i, tt := range tests {
		term := uint64(4 + i)
		_ = c.Step(raft.Message{Type: raft.MsgVoteRequest, From: 1, To: 3, Term: term, LogIndex: tt.lastIndex, LogTerm: tt.lastTerm})
		msgs := sent(t, c, s)
		if len(msgs) != 1 || msgs[0].Reject == tt.granted {
			t.Errorf("candidate last %d/%d: response %v, want granted=%v", tt.lastIndex, tt.lastTerm, msgs, tt.granted)
		}
	}
}

func TestStepRejectsInvalidMessages(t *testing.T) {
	s := raft.NewMemoryStorage()
	c := newCore(t, 1, s, 1, 2, 3)
	for _, m := range []raft.Message{
		{Type: 0, From: 2, To: 1, Term: 1},
		{Type: 99, From: 2, To: 1, Term: 1},
		{Type: raft.MsgAppendRequest, From: 2, To: 3, Term: 1},
		{Type: raft.MsgAppendRequest, From: 0, To: 1, Term: 1},
		{Type: raft.MsgAppendRequest, From: 1, To: 1, Term: 1},
		{Type: raft.MsgAppendRequest, From: 2, To: 1, Term: 0},
		// A snapshot response never rejects (it says how far the log
		// matches); nothing sends one that does.
		{Type: raft.MsgSnapshotResponse, From: 2, To: 1, Term: 1, Reject: true},
	} {
		if err := c.Step(m); !errors.Is(err, raft.ErrInvalidMessage) {
			t.Errorf("Step(%+v) = %v, want ErrInvalidMessage", m, err)
		}
	}
}

func TestFollowerRefusesLeaderOnlyRequests(t *testing.T) {
	n := cluster(t, 1, 2, 3)
	elect(t, n, 1)
	follower, _ := n.Node(2)
	if _, _, err := follower.Core.Propose([]byte("x")); !errors.Is(err, raft.ErrNotLeader) {
		t.Errorf("Propose on a follower = %v, want ErrNotLeader", err)
	}
	if err := follower.Core.TransferLeadership(3); !errors.Is(err, raft.ErrNotLeader) {
		t.Errorf("TransferLeadership on a follower = %v, want ErrNotLeader", err)
	}
	cc := raft.ConfChange{Changes: []raft.ConfChangeSingle{{Type: raft.ConfChangeRemove, NodeID: 3}}}
	if _, _, err := follower.Core.ProposeConfChange(cc); !errors.Is(err, raft.ErrNotLeader) {
		t.Errorf("ProposeConfChange on a follower = %v, want ErrNotLeader", err)
	}
	leader, _ := n.Node(1)
	if err := leader.Core.TransferLeadership(9); !errors.Is(err, raft.ErrTransferTarget) {
		t.Errorf("transfer to a stranger = %v, want ErrTransferTarget", err)
	}
}

func TestSingleNodeCommitsAlone(t *testing.T) {
	n := cluster(t, 1)
	leader := elect(t, n, 1)
	index, _, err := leader.Core.Propose([]byte("solo"))
	if err != nil {
		t.Fatal(err)
	}
	mustStabilize(t, n)
	if got := string(leader.Applied[index]); got != "solo" {
		t.Fatalf("applied %q at %d, want solo", got, index)
	}
	if err := n.ReadIndex(1, 5); err != nil {
		t.Fatal(err)
	}
	mustStabilize(t, n)
	if len(leader.ReadStates) != 1 || leader.ReadStates[0].ID != 5 {
		t.Fatalf("read states %v, want read 5 confirmed", leader.ReadStates)
	}
}

// A follower holding uncommitted entries of an old term has them replaced
// by the leader's (§5.3), using the hint to skip a whole term at once.
func TestConflictingSuffixIsReplacedQuickly(t *testing.T) {
	n := cluster(t, 1, 2, 3)
	elect(t, n, 1)
	n.Isolate(3)
	old, _ := n.Node(1)
	for i := range 50 {
		if _, _, err := old.Core.Propose(fmt.Appendf(nil, "lost-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Process(); err != nil {
		t.Fatal(err)
	}
	n.Queue = nil // none of the 50 entries reach anyone
	n.Heal()
	n.Isolate(1)
	// Followers ignore candidates while their leader's lease lasts; let
	// election timeouts pass until 2 or 3 leads.
	var leader *rafttest.Node
	for i := 0; i < 100 && leader == nil; i++ {
		for _, id := range []uint64{2, 3} {
			if err := n.Tick(id, 1); err != nil {
				t.Fatal(err)
			}
		}
		mustStabilize(t, n)
		if id := n.Leader(); id == 2 || id == 3 {
			leader, _ = n.Node(id)
		}
	}
	if leader == nil {
		t.Fatal("no new leader among 2 and 3")
	}
	if _, _, err := leader.Core.Propose([]byte("kept")); err != nil {
		t.Fatal(err)
	}
	mustStabilize(t, n)
	n.Heal()
	rejects := 0
	for range 40 {
		for _, m := range n.Queue {
			if m.Type == raft.MsgAppendResponse && m.Reject && m.From == 1 {
				rejects++
			}
		}
		if err := n.Tick(leader.ID, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Deliver(nil); err != nil {
			t.Fatal(err)
		}
	}
	mustStabilize(t, n)
	if a, b := n.LogLine(1), n.LogLine(leader.ID); a[1:] != b[1:] {
		t.Fatalf("logs differ after repair:\n%s\n%s", a, b)
	}
	if rejects > 2 {
		t.Errorf("repair took %d rejections; the term hint should skip 50 entries in one or two", rejects)
	}
}

// leaderOf2 bootstraps nodes 1 and 2, configured by configure, and
// elects node 1.
func leaderOf2(t *testing.T, configure func(*raft.Config)) (*rafttest.Network, *rafttest.Node) {
	t.Helper()
	n := rafttest.NewNetwork()
	n.Config = func(id uint64) raft.Config {
		cfg := rafttest.DefaultConfig(id)
		configure(&cfg)
		return cfg
	}
	if err := n.Bootstrap(1, 2); err != nil {
		t.Fatal(err)
	}
	return n, elect(t, n, 1)
}

// proposeNumbered proposes count entries of 4 bytes on leader: "0000",
// "0001", ...
func proposeNumbered(t *testing.T, leader *rafttest.Node, count int) {
	t.Helper()
	for i := range count {
		if _, _, err := leader.Core.Propose(fmt.Appendf(nil, "%04d", i)); err != nil {
			t.Fatalf("proposal %d: %v", i, err)
		}
	}
}

// Flow control: at most MaxInflightMsgs appends in flight to a silent
// follower, each within MaxAppendBytes.
func TestAppendFlowControl(t *testing.T) {
	n, leader := leaderOf2(t, func(cfg *raft.Config) {
		cfg.MaxInflightMsgs = 3
		cfg.MaxAppendBytes = 10
	})
	for i := range 20 {
		if _, _, err := leader.Core.Propose(fmt.Appendf(nil, "%04d", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Process(); err != nil {
			t.Fatal(err)
		}
	}
	appends := 0
	for _, m := range n.Queue {
		if m.Type != raft.MsgAppendRequest {
			continue
		}
		appends++
		size := 0
		for _, e := range m.Entries {
			size += len(e.Data)
		}
		if size > 10 && len(m.Entries) > 1 {
			t.Errorf("append carries %d bytes in %d entries, limit 10", size, len(m.Entries))
		}
	}
	if appends != 3 {
		t.Errorf("%d appends in flight, want MaxInflightMsgs = 3", appends)
	}
	mustStabilize(t, n)
	if st := leader.Core.Status(); st.Commit != st.LastIndex {
		t.Errorf("commit %d, last %d: the window did not drain", st.Commit, st.LastIndex)
	}
}

// The leader holds back appends to a follower once the entry data in
// flight to it reaches MaxInflightBytes, whatever MaxInflightMsgs allows,
// and an entry larger than MaxAppendBytes still goes, alone: large values
// never make an append that cannot be sent, nor hundreds of MB queued on
// one connection.
func TestAppendFlowControlInBytes(t *testing.T) {
	const appendBytes, inflightBytes = 10, 25
	n, leader := leaderOf2(t, func(cfg *raft.Config) {
		cfg.MaxInflightMsgs = 100
		cfg.MaxAppendBytes = appendBytes
		cfg.MaxInflightBytes = inflightBytes
	})
	sizes := []int{4, 4, 4, 50, 4, 4, 4, 4, 4, 4, 4, 4}
	for i, size := range sizes {
		if _, _, err := leader.Core.Propose(make([]byte, size)); err != nil {
			t.Fatalf("proposal %d: %v", i, err)
		}
		if _, err := n.Process(); err != nil {
			t.Fatal(err)
		}
	}
	var appends []int // bytes of each append in flight, in order
	for _, m := range n.Queue {
		if m.Type != raft.MsgAppendRequest || len(m.Entries) == 0 {
			continue
		}
		size := 0
		for _, e := range m.Entries {
			size += len(e.Data)
		}
		if size > appendBytes && len(m.Entries) > 1 {
			t.Errorf("append carries %d bytes in %d entries, limit %d", size, len(m.Entries), appendBytes)
		}
		appends = append(appends, size)
	}
	total := 0
	for i, size := range appends {
		if total >= inflightBytes {
			t.Errorf("append %d of %v sent with %d bytes already in flight, bound %d", i, appends, total, inflightBytes)
		}
		total += size
	}
	if total < inflightBytes {
		t.Errorf("appends in flight %v hold %d bytes: the leader stopped before the bound %d", appends, total, inflightBytes)
	}
	mustStabilize(t, n)
	if st := leader.Core.Status(); st.Commit != st.LastIndex {
		t.Errorf("commit %d, last %d: the window did not drain", st.Commit, st.LastIndex)
	}
}

// A follower that answers heartbeats but not appends (its answers go
// ahead of its fsync; its acknowledgements wait for the disk) gets no more
// entry data than MaxInflightBytes plus one append, however many heartbeat
// answers reach the leader: read rounds make several an interval. Each
// answer under a full window used to free the oldest append in flight, and
// let one more go. What a full window gets instead is one empty append
// per heartbeat interval, which carries no entries.
func TestAppendFlowControlHoldsUnderHeartbeatAnswers(t *testing.T) {
	const appendBytes, inflightBytes, heartbeatTicks = 10, 25, 2
	n, leader := leaderOf2(t, func(cfg *raft.Config) {
		cfg.HeartbeatTicks = heartbeatTicks
		cfg.MaxInflightMsgs = 100
		cfg.MaxAppendBytes = appendBytes
		cfg.MaxInflightBytes = inflightBytes
	})
	proposeNumbered(t, leader, 40)
	const rounds, readsPerRound = 30, 3
	answers := readRounds(t, n, leader, rounds, readsPerRound, func(round, answers, ticks int) {
		total, empty := 0, 0
		for _, m := range n.Queue {
			if m.Type != raft.MsgAppendRequest {
				continue
			}
			if len(m.Entries) == 0 {
				empty++
				continue
			}
			if total >= inflightBytes {
				t.Fatalf("round %d, %d heartbeat answers: an append went with %d bytes already in flight, bound %d", round, answers, total, inflightBytes)
			}
			for _, e := range m.Entries {
				total += len(e.Data)
			}
		}
		// One empty append per heartbeat interval: the first began at
		// the election.
		if intervals := 1 + ticks/heartbeatTicks; empty > intervals {
			t.Fatalf("round %d: %d empty appends in %d heartbeat intervals, want at most one each", round, empty, intervals)
		}
	})
	if answers < rounds*readsPerRound {
		t.Fatalf("only %d heartbeat answers reached the leader: the test did not exercise them", answers)
	}
	mustStabilize(t, n)
	if st := leader.Core.Status(); st.Commit != st.LastIndex {
		t.Errorf("commit %d, last %d: the window did not drain", st.Commit, st.LastIndex)
	}
}

// A follower whose acknowledgements are all lost, but that answers
// heartbeats, is not stuck behind its full window: the empty append a
// heartbeat answer gets it makes it acknowledge what it holds.
func TestAppendFlowControlRecoversLostAcknowledgements(t *testing.T) {
	n, leader := leaderOf2(t, func(cfg *raft.Config) {
		cfg.MaxInflightMsgs = 2
		cfg.MaxAppendBytes = 4
	})
	proposeNumbered(t, leader, 10)
	// Let the acknowledgements flow until the window is full, then lose
	// every one.
	inFlight := func() int {
		count := 0
		for _, m := range n.Queue {
			if m.Type == raft.MsgAppendRequest && len(m.Entries) > 0 {
				count++
			}
		}
		return count
	}
	for i := 0; inFlight() < 2; i++ {
		if i == 10 {
			t.Fatalf("the window never filled: %d appends in flight", inFlight())
		}
		if _, err := n.Deliver(nil); err != nil {
			t.Fatal(err)
		}
	}
	appends := func(m raft.Message) bool { return m.Type == raft.MsgAppendRequest }
	lost := 0
	for inFlight() > 0 {
		if _, err := n.Deliver(appends); err != nil {
			t.Fatal(err)
		}
		kept := n.Queue[:0]
		for _, m := range n.Queue {
			if m.Type == raft.MsgAppendResponse {
				lost++
				continue
			}
			kept = append(kept, m)
		}
		n.Queue = kept
	}
	if st := leader.Core.Status(); st.Commit == st.LastIndex {
		t.Fatalf("commit %d at the last index with every acknowledgement lost", st.Commit)
	}
	if err := n.Tick(1, 1); err != nil {
		t.Fatal(err)
	}
	mustStabilize(t, n)
	if st := leader.Core.Status(); st.Commit != st.LastIndex {
		t.Errorf("commit %d, last %d: the window did not drain after %d acknowledgements were lost", st.Commit, st.LastIndex, lost)
	}
}

// A follower whose appends were all sent, and are unacknowledged (its disk
// is slow), but whose window has room, gets at most one empty append per
// heartbeat interval however many read rounds its heartbeat answers
// close: each answer used to get it one, so reads cost the follower an
// append message per round. And that one is enough: when the appends are
// lost, the empty append of the next interval makes the follower reject,
// and the leader re-sends them.
func TestEmptyAppendsUnderReadsOncePerInterval(t *testing.T) {
	const heartbeatTicks, proposals = 2, 3
	n := rafttest.NewNetwork()
	n.Config = func(id uint64) raft.Config {
		cfg := rafttest.DefaultConfig(id)
		cfg.HeartbeatTicks = heartbeatTicks
		cfg.MaxInflightMsgs = 100
		return cfg
	}
	if err := n.Bootstrap(1, 2); err != nil {
		t.Fatal(err)
	}
	leader := elect(t, n, 1)
	for i := range proposals {
		if _, _, err := leader.Core.Propose(fmt.Appendf(nil, "%04d", i)); err != nil {
			t.Fatalf("proposal %d: %v", i, err)
		}
	}
	countAppends := func() (withEntries, empty int) {
		for _, m := range n.Queue {
			switch {
			case m.Type != raft.MsgAppendRequest:
			case len(m.Entries) == 0:
				empty++
			default:
				withEntries++
			}
		}
		return withEntries, empty
	}
	if _, err := n.Process(); err != nil {
		t.Fatal(err)
	}
	proposalAppends, _ := countAppends()
	if proposalAppends == 0 {
		t.Fatal("the proposals went out in no append")
	}
	const rounds, readsPerRound = 30, 3
	answers := readRounds(t, n, leader, rounds, readsPerRound, func(round, answers, ticks int) {
		withEntries, empty := countAppends()
		if withEntries != proposalAppends {
			t.Fatalf("round %d: %d appends with entries queued, want the %d the proposals went in (nothing is new)", round, withEntries, proposalAppends)
		}
		// The first interval began at the election.
		if intervals := 1 + ticks/heartbeatTicks; empty > intervals {
			t.Fatalf("round %d, %d heartbeat answers: %d empty appends in %d heartbeat intervals, want at most one each", round, answers, empty, intervals)
		}
	})
	if answers < rounds*readsPerRound {
		t.Fatalf("only %d heartbeat answers reached the leader: the test did not exercise them", answers)
	}
	if st := leader.Core.Status(); st.Commit == st.LastIndex {
		t.Fatalf("commit %d at the last index with no append delivered", st.Commit)
	}

	// Lose every append, then let one heartbeat interval pass.
	kept := n.Queue[:0]
	for _, m := range n.Queue {
		if m.Type != raft.MsgAppendRequest {
			kept = append(kept, m)
		}
	}
	n.Queue = kept
	if err := n.Tick(1, heartbeatTicks); err != nil {
		t.Fatal(err)
	}
	mustStabilize(t, n)
	st := leader.Core.Status()
	if st.Commit != st.LastIndex {
		t.Fatalf("commit %d, last %d: the lost appends were not re-sent within a heartbeat interval", st.Commit, st.LastIndex)
	}
	follower, err := n.Node(2)
	if err != nil {
		t.Fatal(err)
	}
	if got := follower.Core.Status(); got.LastIndex != st.LastIndex {
		t.Errorf("follower's last index %d, leader's %d", got.LastIndex, st.LastIndex)
	}
}

func TestUncommittedBytesBound(t *testing.T) {
	n := rafttest.NewNetwork()
	n.Config = func(id uint64) raft.Config {
		cfg := rafttest.DefaultConfig(id)
		cfg.MaxUncommittedBytes = 100
		return cfg
	}
	if err := n.Bootstrap(1, 2, 3); err != nil {
		t.Fatal(err)
	}
	leader := elect(t, n, 1)
	n.Isolate(1)
	var err error
	for i := 0; i < 20 && err == nil; i++ {
		_, _, err = leader.Core.Propose(make([]byte, 30))
	}
	if !errors.Is(err, raft.ErrProposalDropped) {
		t.Fatalf("proposals past the uncommitted bound: %v, want ErrProposalDropped", err)
	}
}

// The same inputs give the same outputs: a scenario replays identically.
func TestDeterministic(t *testing.T) {
	script := "> bootstrap 1 2 3 4 5\n> run 30\n> propose 1 a\n> isolate 1\n> run 40\n> heal\n> run 40\n> status\n"
	first := rafttest.RunScript(script)
	if second := rafttest.RunScript(script); first != second {
		t.Fatalf("two runs differ:\n%s\n---\n%s", first, second)
	}
}

// Example runs a single-node cluster by hand: the loop every caller of the
// core writes (persist, send, apply, advance).
func Example() {
	storage := raft.NewMemoryStorage()
	cfg := raft.DefaultConfig()
	cfg.ID = 1
	cfg.Storage = storage
	cfg.Rand = rand.New(rand.NewPCG(1, 1))
	cfg.Peers = []uint64{1}
	core, err := raft.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	handle := func() {
		for core.HasReady() {
			rd := core.Ready()
			if !rd.HardState.IsEmpty() {
				_ = storage.SetHardState(rd.HardState)
			}
			_ = storage.Append(rd.Entries)
			// (send rd.Messages here: there are no peers)
			for _, e := range rd.CommittedEntries {
				if e.Type == raft.EntryNormal && len(e.Data) > 0 {
					fmt.Printf("apply %d: %s\n", e.Index, e.Data)
				}
			}
			core.Advance(rd)
		}
	}
	handle()
	core.Campaign()
	handle()
	if _, _, err := core.Propose([]byte("hello")); err != nil {
		fmt.Println(err)
	}
	handle()
	fmt.Println(core.Status().Role)
	// Output:
	// apply 3: hello
	// leader
}

// A new leader changes no membership until an entry of its own term has
// committed (dissertation §4.1 and its errata): before that, its log may
// lack a change a previous leader committed.
func TestNewLeaderWaitsForItsFirstCommitBeforeChanges(t *testing.T) {
	n := cluster(t, 1, 2, 3)
	leader := mustNode(t, n, 1)
	leader.Core.Campaign()
	noAppends := func(m raft.Message) bool { return m.Type != raft.MsgAppendRequest }
	for i := 0; i < 10 && leader.Core.Status().Role != raft.Leader; i++ {
		if _, err := n.Deliver(noAppends); err != nil {
			t.Fatal(err)
		}
	}
	if st := leader.Core.Status(); st.Role != raft.Leader || st.Commit == st.LastIndex {
		t.Fatalf("want a leader whose empty entry is not committed yet: %s", n.StatusLine(1))
	}
	addLearner := raft.ConfChange{Changes: []raft.ConfChangeSingle{{Type: raft.ConfChangeAddLearner, NodeID: 4}}}
	if _, _, err := leader.Core.ProposeConfChange(addLearner); !errors.Is(err, raft.ErrConfChangePending) {
		t.Fatalf("ProposeConfChange before the leader's first commit = %v, want ErrConfChangePending", err)
	}
	mustStabilize(t, n)
	if _, _, err := leader.Core.ProposeConfChange(addLearner); err != nil {
		t.Fatalf("ProposeConfChange after the leader's first commit: %v", err)
	}
}

// Messages that would break the leader's Progress invariants, or reach an
// assertion, come from no correct peer and are refused without effect: an
// acknowledgement past the leader's last index (the leader used to record
// it as the follower's match and then panic reading its log there), an
// answer to a read round never sent, and appends whose entries do not
// continue one another.
func TestStepRefusesWhatNoLeaderOrFollowerSends(t *testing.T) {
	n := cluster(t, 1, 2, 3)
	leader := elect(t, n, 1)
	st := leader.Core.Status()
	last, term := st.LastIndex, st.Term
	follower := mustNode(t, n, 2)
	for _, tt := range []struct {
		to *rafttest.Node
		m  raft.Message
	}{
		{leader, raft.Message{Type: raft.MsgAppendResponse, From: 2, To: 1, Term: term, LogIndex: last + 5}},
		{leader, raft.Message{Type: raft.MsgSnapshotResponse, From: 2, To: 1, Term: term, LogIndex: last + 5}},
		{leader, raft.Message{Type: raft.MsgHeartbeatResponse, From: 2, To: 1, Term: term, ReadRound: 7}},
		{follower, raft.Message{Type: raft.MsgAppendRequest, From: 1, To: 2, Term: term, LogIndex: last, LogTerm: term,
			Entries: []raft.Entry{{Index: last + 2, Term: term}}}}, // a gap
		{follower, raft.Message{Type: raft.MsgAppendRequest, From: 1, To: 2, Term: term, LogIndex: last, LogTerm: term,
			Entries: []raft.Entry{{Index: last + 1, Term: term + 1}}}}, // past the sender's term
		{follower, raft.Message{Type: raft.MsgAppendRequest, From: 1, To: 2, Term: term, LogIndex: last, LogTerm: term,
			Entries: []raft.Entry{{Index: last + 1, Term: term}, {Index: last + 2, Term: term - 1}}}}, // term going back
	} {
		before := tt.to.Core.Status()
		if err := tt.to.Core.Step(tt.m); !errors.Is(err, raft.ErrInvalidMessage) {
			t.Errorf("Step(%v) on node %d = %v, want ErrInvalidMessage", tt.m, tt.to.ID, err)
		}
		a, b := tt.to.Core.Status(), before
		if a.LastIndex != b.LastIndex || a.Commit != b.Commit || tt.to.Core.HasReady() ||
			a.Progress[2].Match != b.Progress[2].Match || a.Progress[2].Next != b.Progress[2].Next || a.Progress[2].State != b.Progress[2].State {
			t.Errorf("Step(%v) changed node %d: %+v -> %+v", tt.m, tt.to.ID, b, a)
		}
	}
	// The cluster is unharmed.
	if _, _, err := leader.Core.Propose([]byte("after")); err != nil {
		t.Fatal(err)
	}
	mustStabilize(t, n)
	if st := leader.Core.Status(); st.Commit != last+1 {
		t.Fatalf("commit %d after the refused messages, want %d", st.Commit, last+1)
	}
}

// The leader's own copy of an entry counts towards a quorum only once its
// caller has persisted it (Advance): a caller may send the appends of a
// Ready before it writes that Ready's entries, in parallel with the
// followers (dissertation §10.2.1), and a commit must not rest on a copy a
// crash of the leader could lose. Here a follower acknowledges the entry
// while the leader's Ready is still being written: with one follower of
// two, the commit index waits for the leader's own write.
func TestLeaderCountsItsOwnCopyOnlyOncePersisted(t *testing.T) {
	s := raft.NewMemoryStorage()
	c := newCore(t, 1, s, 1, 2, 3)
	sent(t, c, s)
	c.Campaign()
	sent(t, c, s)
	if err := c.Step(raft.Message{Type: raft.MsgPreVoteResponse, From: 2, To: 1, Term: 2}); err != nil {
		t.Fatal(err)
	}
	sent(t, c, s)
	if err := c.Step(raft.Message{Type: raft.MsgVoteResponse, From: 2, To: 1, Term: 2}); err != nil {
		t.Fatal(err)
	}
	if st := c.Status(); st.Role != raft.Leader {
		t.Fatalf("node 1 is %v, want leader", st.Role)
	}
	rd := c.Ready() // the leader's empty entry of term 2, at index 2
	if len(rd.Entries) != 1 || rd.Entries[0].Index != 2 {
		t.Fatalf("Ready entries %v, want the leader's entry at 2", rd.Entries)
	}
	if got := c.Status().Progress[1].Match; got != 1 {
		t.Fatalf("before the leader persisted entry 2, its own Match is %d, want 1", got)
	}
	// Follower 2 acknowledges entry 2 before the leader's write is done.
	if err := c.Step(raft.Message{Type: raft.MsgAppendResponse, From: 2, To: 1, Term: 2, LogIndex: 2}); err != nil {
		t.Fatal(err)
	}
	if got := c.Status().Commit; got != 1 {
		t.Fatalf("commit %d with entry 2 on follower 2 only: the leader counted its unpersisted copy", got)
	}
	_ = s.SetHardState(rd.HardState)
	_ = s.Append(rd.Entries)
	c.Advance(rd)
	if got := c.Status().Commit; got != 2 {
		t.Fatalf("after the leader persisted entry 2 (and follower 2 has it), commit %d, want 2", got)
	}
}

// A single voter commits its entries once it has persisted them: its own
// copy is the quorum.
func TestSingleVoterCommitsOncePersisted(t *testing.T) {
	s := raft.NewMemoryStorage()
	c := newCore(t, 1, s, 1)
	sent(t, c, s)
	c.Campaign()
	sent(t, c, s)
	index, _, err := c.Propose([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Status().Commit; got >= index {
		t.Fatalf("commit %d before entry %d was persisted", got, index)
	}
	sent(t, c, s)
	if got := c.Status().Commit; got != index {
		t.Fatalf("after the entry was persisted, commit %d, want %d", got, index)
	}
}

// readRounds runs rounds of readsPerRound read-index requests on leader,
// a heartbeat tick every second round, and delivers only heartbeats and
// their answers (the appends stay queued, unanswered), calling check
// after each round with the heartbeat answers and ticks so far. It
// returns the heartbeat answers that reached the leader.
func readRounds(t *testing.T, n *rafttest.Network, leader *rafttest.Node, rounds, readsPerRound int, check func(round, answers, ticks int)) int {
	t.Helper()
	heartbeats := func(m raft.Message) bool {
		return m.Type == raft.MsgHeartbeatRequest || m.Type == raft.MsgHeartbeatResponse
	}
	answers, ticks := 0, 0
	for round := range rounds {
		for i := range readsPerRound {
			if err := leader.Core.ReadIndex(uint64(round*readsPerRound + i + 1)); err != nil {
				t.Fatal(err)
			}
			if _, err := n.Process(); err != nil {
				t.Fatal(err)
			}
		}
		if round%2 == 1 {
			if err := n.Tick(1, 1); err != nil {
				t.Fatal(err)
			}
			ticks++
		}
		// Two passes: the requests, then the answers.
		for range 2 {
			for _, m := range n.Queue {
				if m.Type == raft.MsgHeartbeatResponse {
					answers++
				}
			}
			if _, err := n.Deliver(heartbeats); err != nil {
				t.Fatal(err)
			}
		}
		check(round, answers, ticks)
	}
	return answers
}

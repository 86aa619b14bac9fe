package raft_test

import (
	"errors"
	"testing"

	"coord/raft"
	"coord/raft/rafttest"
)

// appliedCount counts the entries applied on node id whose data is data.
func appliedCount(t *testing.T, n *rafttest.Network, id uint64, data string) int {
	t.Helper()
	node, err := n.Node(id)
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, d := range node.Applied {
		if string(d) == data {
			count++
		}
	}
	return count
}

// A follower's proposals go to the leader over the peer transport, are
// appended there as if proposed locally, and apply once on every node.
func TestFollowerForwardsProposalsToItsLeader(t *testing.T) {
	n := cluster(t, 1, 2, 3)
	elect(t, n, 1)
	follower, _ := n.Node(2)
	for _, data := range []string{"a", "b"} {
		if _, err := follower.Core.Forward([]byte(data)); err != nil {
			t.Fatalf("Forward(%q) on a follower: %v", data, err)
		}
	}
	mustStabilize(t, n)
	for _, id := range n.IDs() {
		for _, data := range []string{"a", "b"} {
			if got := appliedCount(t, n, id, data); got != 1 {
				t.Errorf("node %d applied %q %d times, want once", id, data, got)
			}
		}
	}
	if err := n.Check(); err != nil {
		t.Fatal(err)
	}
}

// followerOf returns a lone core (no network) that follows leader 2 in
// term 2, with the messages of getting there taken.
func followerOf(t *testing.T, cfg func(*raft.Config)) (*raft.Core, *raft.MemoryStorage) {
	t.Helper()
	s := raft.NewMemoryStorage()
	c := rafttest.DefaultConfig(1)
	c.Storage, c.Peers = s, []uint64{1, 2, 3}
	if cfg != nil {
		cfg(&c)
	}
	core, err := raft.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := core.Step(raft.Message{Type: raft.MsgHeartbeatRequest, From: 2, To: 1, Term: 2}); err != nil {
		t.Fatal(err)
	}
	sent(t, core, s)
	return core, s
}

// Proposals forwarded between two Readies travel in one message, up to an
// append's size.
func TestForwardedProposalsAreBatched(t *testing.T) {
	c, s := followerOf(t, func(cfg *raft.Config) { cfg.MaxAppendBytes = 10 })
	for _, data := range []string{"aaaa", "bbbb", "cccc"} {
		if _, err := c.Forward([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	msgs := sent(t, c, s)
	if len(msgs) != 2 {
		t.Fatalf("sent %v, want two proposal requests", msgs)
	}
	for i, want := range [][]string{{"aaaa", "bbbb"}, {"cccc"}} {
		m := msgs[i]
		if m.Type != raft.MsgProposalRequest || m.To != 2 || m.Term != 2 || len(m.Entries) != len(want) || m.ReadRound == 0 {
			t.Fatalf("message %d = %v, want a numbered proposal request to 2 in term 2 with %d proposals", i, m, len(want))
		}
		for j, e := range m.Entries {
			if string(e.Data) != want[j] || e.Index != 0 || e.Term != 0 || e.Type != raft.EntryNormal {
				t.Errorf("message %d proposal %d = %+v, want %q without index or term", i, j, e, want[j])
			}
		}
	}
}

// A node that knows no leader refuses at once; nothing is sent.
func TestForwardWithoutLeaderIsRefused(t *testing.T) {
	s := raft.NewMemoryStorage()
	c := newCore(t, 1, s, 1, 2, 3)
	if _, err := c.Forward([]byte("x")); !errors.Is(err, raft.ErrNotLeader) {
		t.Fatalf("Forward with no leader = %v, want ErrNotLeader", err)
	}
	if msgs := sent(t, c, s); len(msgs) != 0 {
		t.Fatalf("sent %v after a refused Forward", msgs)
	}
	c2, _ := followerOf(t, nil)
	if _, err := c2.Forward(nil); !errors.Is(err, raft.ErrProposalDropped) {
		t.Fatalf("Forward of nothing = %v, want ErrProposalDropped", err)
	}
}

// The leader refuses what it would refuse locally, and says so at once,
// naming the node to go to: itself when its uncommitted log is full, the
// target of a transfer in progress; a stale request (of an earlier term)
// is refused in the leader's term. Nothing refused is appended.
func TestLeaderRefusesForwardedProposalsItWouldRefuse(t *testing.T) {
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
	term := leader.Core.Status().Term
	request := uint64(40)
	proposal := func(size int) raft.Message {
		request++
		return raft.Message{Type: raft.MsgProposalRequest, From: 2, To: 1, Term: term, ReadRound: request,
			Entries: []raft.Entry{{Type: raft.EntryNormal, Data: make([]byte, size)}}}
	}
	// refused steps m into the leader and checks that it answered with a
	// refusal naming lead, in its term, and appended nothing.
	refused := func(what string, m raft.Message, lead uint64) {
		t.Helper()
		last := leader.Core.Status().LastIndex
		if err := leader.Core.Step(m); err != nil {
			t.Fatal(err)
		}
		if got := leader.Core.Status().LastIndex; got != last {
			t.Fatalf("%s: the proposal was appended: last index %d, want %d", what, got, last)
		}
		rd := leader.Core.Ready()
		leader.Core.Advance(rd)
		want := raft.Message{Type: raft.MsgProposalResponse, From: 1, To: 2, Term: term, ReadRound: m.ReadRound, Reject: true, Lead: lead}
		for _, got := range rd.Messages {
			if got.Type == raft.MsgProposalResponse && got.ReadRound == m.ReadRound {
				if got.String() != want.String() || got.Lead != lead {
					t.Fatalf("%s: answered %v (lead %d), want %v (lead %d)", what, got, got.Lead, want, lead)
				}
				return
			}
		}
		t.Fatalf("%s: no answer in %v", what, rd.Messages)
	}
	// Over the uncommitted-bytes limit (the leader is cut off, so
	// nothing commits): busy, retry here.
	n.Isolate(1)
	if err := leader.Core.Step(proposal(60)); err != nil {
		t.Fatal(err)
	}
	refused("over the uncommitted limit", proposal(60), 1)
	n.Heal()
	mustStabilize(t, n)
	// While a transfer is in progress (3 is cut off, so it does not end):
	// go to 3.
	n.Isolate(3)
	if err := leader.Core.TransferLeadership(3); err != nil {
		t.Fatal(err)
	}
	refused("during a transfer to 3", proposal(1), 3)
	// A stale proposal request, of an earlier term: this node leads.
	stale := proposal(1)
	stale.Term--
	refused("stale", stale, 1)
}

// A follower that receives a proposal request (its sender thought it led)
// refuses it rather than pass it on, naming the leader it follows.
func TestFollowerRefusesProposalRequests(t *testing.T) {
	c, s := followerOf(t, nil)
	m := raft.Message{Type: raft.MsgProposalRequest, From: 3, To: 1, Term: 2, ReadRound: 9, Entries: []raft.Entry{{Type: raft.EntryNormal, Data: []byte("x")}}}
	if err := c.Step(m); err != nil {
		t.Fatal(err)
	}
	msgs := sent(t, c, s)
	want := raft.Message{Type: raft.MsgProposalResponse, From: 1, To: 3, Term: 2, ReadRound: 9, Reject: true, Lead: 2}
	if len(msgs) != 1 || msgs[0].String() != want.String() || msgs[0].Lead != 2 {
		t.Fatalf("a follower answered a proposal request with %v, want only %v naming leader 2", msgs, want)
	}
	if got := c.Status().LastIndex; got != 1 {
		t.Fatalf("a follower appended a proposal request: last index %d", got)
	}
}

// results collects the forward results a node's Ready carries, with its
// messages, and advances.
func results(t *testing.T, c *raft.Core, s *raft.MemoryStorage) ([]raft.ForwardResult, []raft.Message) {
	t.Helper()
	var res []raft.ForwardResult
	var msgs []raft.Message
	for c.HasReady() {
		rd := c.Ready()
		if !rd.HardState.IsEmpty() {
			_ = s.SetHardState(rd.HardState)
		}
		_ = s.Append(rd.Entries)
		res = append(res, rd.ForwardResults...)
		msgs = append(msgs, rd.Messages...)
		c.Advance(rd)
	}
	return res, msgs
}

// The follower learns from the leader's answer what became of each
// proposal of a request: where it was appended (the batch in order from
// the index answered), or that it was refused, with the node to go to. The
// answer is a fact even when it comes in another term; an answer to no
// request in flight, or from another node than the one asked, is ignored.
func TestFollowerLearnsWhereItsProposalsWent(t *testing.T) {
	c, s := followerOf(t, nil)
	forward := func(data string) uint64 {
		t.Helper()
		ticket, err := c.Forward([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		return ticket
	}
	a, b := forward("a"), forward("b")
	_, msgs := results(t, c, s)
	if len(msgs) != 1 || len(msgs[0].Entries) != 2 {
		t.Fatalf("sent %v, want one request with both proposals", msgs)
	}
	first := msgs[0].ReadRound
	x := forward("x")
	_, msgs = results(t, c, s)
	second := msgs[0].ReadRound
	y := forward("y")
	_, msgs = results(t, c, s)
	third := msgs[0].ReadRound
	step := func(m raft.Message) []raft.ForwardResult {
		t.Helper()
		if err := c.Step(m); err != nil {
			t.Fatal(err)
		}
		res, _ := results(t, c, s)
		return res
	}
	answer := raft.Message{Type: raft.MsgProposalResponse, From: 2, To: 1, Term: 2}
	// From another node than the one asked, or to no request: ignored.
	wrong := answer
	wrong.From, wrong.ReadRound, wrong.LogIndex, wrong.LogTerm = 3, first, 5, 2
	if res := step(wrong); len(res) != 0 {
		t.Fatalf("an answer from node 3 to a request sent to 2 gave %+v", res)
	}
	accepted := answer
	accepted.ReadRound, accepted.LogIndex, accepted.LogTerm = first, 5, 2
	res := step(accepted)
	if len(res) != 2 || res[0] != (raft.ForwardResult{Ticket: a, Index: 5, Term: 2}) || res[1] != (raft.ForwardResult{Ticket: b, Index: 6, Term: 2}) {
		t.Fatalf("acceptance at 5/2 gave %+v, want tickets %d and %d at 5/2 and 6/2", res, a, b)
	}
	if res := step(accepted); len(res) != 0 {
		t.Fatalf("a duplicate answer gave %+v", res)
	}
	refusal := answer
	refusal.ReadRound, refusal.Reject, refusal.Lead = second, true, 3
	res = step(refusal)
	if len(res) != 1 || res[0].Ticket != x || res[0].Lead != 3 || !errors.Is(res[0].Err, raft.ErrNotLeader) || res[0].Index != 0 {
		t.Fatalf("refusal naming 3 gave %+v, want ticket %d refused (ErrNotLeader) with lead 3", res, x)
	}
	// A refusal in a newer term: taken, then this node moves to the term.
	late := answer
	late.Term, late.ReadRound, late.Reject, late.Lead = 3, third, true, 2
	res = step(late)
	if len(res) != 1 || res[0].Ticket != y || res[0].Lead != 2 || !errors.Is(res[0].Err, raft.ErrProposalDropped) {
		t.Fatalf("refusal by the leader itself in term 3 gave %+v, want ticket %d dropped for now, lead 2", res, y)
	}
	if st := c.Status(); st.Term != 3 {
		t.Fatalf("after an answer of term 3 the follower is at term %d", st.Term)
	}
}

// A request the leader never answers (the message or its answer was lost
// with a connection) is given up after two election timeouts, and says
// so: its outcome is unknown.
func TestUnansweredForwardIsGivenUp(t *testing.T) {
	c, s := followerOf(t, nil)
	ticket, err := c.Forward([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	results(t, c, s)
	cfg := rafttest.DefaultConfig(1)
	for range 2*cfg.ElectionTicks - 1 {
		c.Tick()
		// Keep the follower's leader alive: it must not campaign.
		if err := c.Step(raft.Message{Type: raft.MsgHeartbeatRequest, From: 2, To: 1, Term: c.Status().Term}); err != nil {
			t.Fatal(err)
		}
		if res, _ := results(t, c, s); len(res) != 0 {
			t.Fatalf("given up before two election timeouts: %+v", res)
		}
	}
	c.Tick()
	res, _ := results(t, c, s)
	if len(res) != 1 || res[0].Ticket != ticket || !errors.Is(res[0].Err, raft.ErrForwardUnanswered) {
		t.Fatalf("after two election timeouts: %+v, want ticket %d unanswered", res, ticket)
	}
}

// On a leader, Forward appends at once, and the result comes in the Ready
// with the entry.
func TestForwardOnLeaderPlacesAtOnce(t *testing.T) {
	n := cluster(t, 1, 2, 3)
	leader := elect(t, n, 1)
	ticket, err := leader.Core.Forward([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	st := leader.Core.Status()
	rd := leader.Core.Ready()
	if len(rd.ForwardResults) != 1 || rd.ForwardResults[0] != (raft.ForwardResult{Ticket: ticket, Index: st.LastIndex, Term: st.Term}) {
		t.Fatalf("Ready after Forward on the leader has %+v, want ticket %d at %d/%d", rd.ForwardResults, ticket, st.LastIndex, st.Term)
	}
}

// A proposal request carries only normal entries with data and no index or
// term, and nothing else: a forwarded membership change would skip
// ProposeConfChange's checks.
func TestStepRejectsInvalidProposalRequests(t *testing.T) {
	s := raft.NewMemoryStorage()
	c := newCore(t, 1, s, 1, 2, 3)
	ok := raft.Entry{Type: raft.EntryNormal, Data: []byte("x")}
	base := raft.Message{Type: raft.MsgProposalRequest, From: 2, To: 1, Term: 1, ReadRound: 1}
	with := func(f func(*raft.Message)) raft.Message {
		m := base
		m.Entries = []raft.Entry{ok}
		f(&m)
		return m
	}
	cc := raft.ConfChange{Changes: []raft.ConfChangeSingle{{Type: raft.ConfChangeRemove, NodeID: 3}}}
	for name, m := range map[string]raft.Message{
		"no proposals":     base,
		"membership":       with(func(m *raft.Message) { m.Entries[0] = raft.Entry{Type: raft.EntryConfChange, Data: cc.Marshal()} }),
		"empty":            with(func(m *raft.Message) { m.Entries[0].Data = nil }),
		"index":            with(func(m *raft.Message) { m.Entries[0].Index = 7 }),
		"term":             with(func(m *raft.Message) { m.Entries[0].Term = 1 }),
		"commit":           with(func(m *raft.Message) { m.Commit = 3 }),
		"log index":        with(func(m *raft.Message) { m.LogIndex = 3 }),
		"reject":           with(func(m *raft.Message) { m.Reject = true }),
		"request 0":        with(func(m *raft.Message) { m.ReadRound = 0 }),
		"lead":             with(func(m *raft.Message) { m.Lead = 2 }),
		"snapshot":         with(func(m *raft.Message) { m.Snapshot.Metadata.Index = 5 }),
		"second is broken": with(func(m *raft.Message) { m.Entries = append(m.Entries, raft.Entry{Type: 9, Data: []byte("y")}) }),
	} {
		if err := c.Step(m); !errors.Is(err, raft.ErrInvalidMessage) {
			t.Errorf("%s: Step(%v) = %v, want ErrInvalidMessage", name, m, err)
		}
	}
}

// An answer to a proposal request says where, in the leader's own term, or
// refuses without an index; anything else no correct peer sends.
func TestStepRejectsInvalidProposalResponses(t *testing.T) {
	c, _ := followerOf(t, nil)
	base := raft.Message{Type: raft.MsgProposalResponse, From: 2, To: 1, Term: 2, ReadRound: 1}
	with := func(f func(*raft.Message)) raft.Message {
		m := base
		f(&m)
		return m
	}
	for name, m := range map[string]raft.Message{
		"request 0":           with(func(m *raft.Message) { m.LogIndex, m.LogTerm, m.ReadRound = 3, 2, 0 }),
		"no index":            base,
		"later term":          with(func(m *raft.Message) { m.LogIndex, m.LogTerm = 3, 3 }),
		"term 0":              with(func(m *raft.Message) { m.LogIndex = 3 }),
		"acceptance and lead": with(func(m *raft.Message) { m.LogIndex, m.LogTerm, m.Lead = 3, 2, 2 }),
		"refusal with index":  with(func(m *raft.Message) { m.Reject, m.LogIndex = true, 3 }),
		"entries":             with(func(m *raft.Message) { m.Reject, m.Entries = true, []raft.Entry{{Data: []byte("x")}} }),
		"commit":              with(func(m *raft.Message) { m.Reject, m.Commit = true, 1 }),
		"hint":                with(func(m *raft.Message) { m.Reject, m.HintIndex = true, 1 }),
		"transfer":            with(func(m *raft.Message) { m.Reject, m.Transfer = true, true }),
		"snapshot":            with(func(m *raft.Message) { m.Reject, m.Snapshot.Metadata.Index = true, 5 }),
	} {
		if err := c.Step(m); !errors.Is(err, raft.ErrInvalidMessage) {
			t.Errorf("%s: Step(%v) = %v, want ErrInvalidMessage", name, m, err)
		}
	}
}

// A copy of a request the leader answered (a network that duplicates)
// gets the same answer and is not appended again, even after the leader
// stepped down: a refusal stays true, and the index answered is the only
// copy's.
func TestDuplicateProposalRequestGetsTheSameAnswer(t *testing.T) {
	n := cluster(t, 1, 2, 3)
	leader := elect(t, n, 1)
	term := leader.Core.Status().Term
	m := raft.Message{Type: raft.MsgProposalRequest, From: 2, To: 1, Term: term, ReadRound: 7,
		Entries: []raft.Entry{{Type: raft.EntryNormal, Data: []byte("x")}}}
	answer := func() raft.Message {
		t.Helper()
		if err := leader.Handler.Step(m); err != nil {
			t.Fatal(err)
		}
		if err := leader.Handler.Handle(); err != nil {
			t.Fatal(err)
		}
		var got []raft.Message
		for _, q := range n.Queue {
			if q.Type == raft.MsgProposalResponse {
				got = append(got, q)
			}
		}
		n.Queue = nil
		if len(got) != 1 {
			t.Fatalf("answers %v, want one", got)
		}
		return got[0]
	}
	first := answer()
	if first.Reject || first.LogTerm != term {
		t.Fatalf("answer %v, want an acceptance in term %d", first, term)
	}
	if again := answer(); again.String() != first.String() {
		t.Fatalf("a copy was answered %v, the first %v", again, first)
	}
	// Deposed by a newer term, it still says where it appended it.
	if err := leader.Handler.Step(raft.Message{Type: raft.MsgHeartbeatRequest, From: 3, To: 1, Term: term + 1}); err != nil {
		t.Fatal(err)
	}
	if again := answer(); again.Reject || again.LogIndex != first.LogIndex || again.LogTerm != term || again.Term != term+1 {
		t.Fatalf("a copy after stepping down was answered %v, want an acceptance at %d/%d in term %d", again, first.LogIndex, term, term+1)
	}
	n.Queue = nil
	last, err := leader.Storage.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := leader.Storage.Entries(1, last+1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	copies := 0
	for _, e := range entries {
		if string(e.Data) == "x" {
			copies++
		}
	}
	if copies != 1 {
		t.Fatalf("the log holds %d copies of the proposal, want 1", copies)
	}
}

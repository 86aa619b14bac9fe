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
		if err := follower.Core.Forward([]byte(data)); err != nil {
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
		if err := c.Forward([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	msgs := sent(t, c, s)
	if len(msgs) != 2 {
		t.Fatalf("sent %v, want two proposal requests", msgs)
	}
	for i, want := range [][]string{{"aaaa", "bbbb"}, {"cccc"}} {
		m := msgs[i]
		if m.Type != raft.MsgProposalRequest || m.To != 2 || m.Term != 2 || len(m.Entries) != len(want) {
			t.Fatalf("message %d = %v, want a proposal request to 2 in term 2 with %d proposals", i, m, len(want))
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
	if err := c.Forward([]byte("x")); !errors.Is(err, raft.ErrNotLeader) {
		t.Fatalf("Forward with no leader = %v, want ErrNotLeader", err)
	}
	if msgs := sent(t, c, s); len(msgs) != 0 {
		t.Fatalf("sent %v after a refused Forward", msgs)
	}
	c2, _ := followerOf(t, nil)
	if err := c2.Forward(nil); !errors.Is(err, raft.ErrProposalDropped) {
		t.Fatalf("Forward of nothing = %v, want ErrProposalDropped", err)
	}
}

// The leader drops what it would refuse locally, without an answer: the
// follower learns nothing from the leader, only from its own log.
func TestLeaderDropsForwardedProposalsItWouldRefuse(t *testing.T) {
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
	proposal := func(size int) raft.Message {
		return raft.Message{Type: raft.MsgProposalRequest, From: 2, To: 1, Term: leader.Core.Status().Term,
			Entries: []raft.Entry{{Type: raft.EntryNormal, Data: make([]byte, size)}}}
	}
	// Over the uncommitted-bytes limit (the leader is cut off, so
	// nothing commits).
	n.Isolate(1)
	if err := leader.Core.Step(proposal(60)); err != nil {
		t.Fatal(err)
	}
	last := leader.Core.Status().LastIndex
	if err := leader.Core.Step(proposal(60)); err != nil {
		t.Fatal(err)
	}
	if got := leader.Core.Status().LastIndex; got != last {
		t.Fatalf("a forwarded proposal over the uncommitted limit was appended: last index %d, want %d", got, last)
	}
	n.Heal()
	mustStabilize(t, n)
	// While a transfer is in progress (3 is cut off, so it does not end).
	n.Isolate(3)
	if err := leader.Core.TransferLeadership(3); err != nil {
		t.Fatal(err)
	}
	last = leader.Core.Status().LastIndex
	if err := leader.Core.Step(proposal(1)); err != nil {
		t.Fatal(err)
	}
	if got := leader.Core.Status().LastIndex; got != last {
		t.Fatalf("a forwarded proposal during a transfer was appended: last index %d, want %d", got, last)
	}
	// A stale proposal request, of an earlier term, is ignored too.
	stale := proposal(1)
	stale.Term--
	if err := leader.Core.Step(stale); err != nil {
		t.Fatal(err)
	}
	if got := leader.Core.Status().LastIndex; got != last {
		t.Fatalf("a stale proposal request was appended: last index %d, want %d", got, last)
	}
}

// A follower that receives a proposal request (its sender thought it led)
// drops it rather than pass it on.
func TestFollowerDropsProposalRequests(t *testing.T) {
	c, s := followerOf(t, nil)
	m := raft.Message{Type: raft.MsgProposalRequest, From: 3, To: 1, Term: 2, Entries: []raft.Entry{{Type: raft.EntryNormal, Data: []byte("x")}}}
	if err := c.Step(m); err != nil {
		t.Fatal(err)
	}
	if msgs := sent(t, c, s); len(msgs) != 0 {
		t.Fatalf("a follower passed a proposal request on: %v", msgs)
	}
	if got := c.Status().LastIndex; got != 1 {
		t.Fatalf("a follower appended a proposal request: last index %d", got)
	}
}

// A proposal request carries only normal entries with data and no index or
// term, and nothing else: a forwarded membership change would skip
// ProposeConfChange's checks.
func TestStepRejectsInvalidProposalRequests(t *testing.T) {
	s := raft.NewMemoryStorage()
	c := newCore(t, 1, s, 1, 2, 3)
	ok := raft.Entry{Type: raft.EntryNormal, Data: []byte("x")}
	base := raft.Message{Type: raft.MsgProposalRequest, From: 2, To: 1, Term: 1}
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
		"read round":       with(func(m *raft.Message) { m.ReadRound = 1 }),
		"snapshot":         with(func(m *raft.Message) { m.Snapshot.Metadata.Index = 5 }),
		"second is broken": with(func(m *raft.Message) { m.Entries = append(m.Entries, raft.Entry{Type: 9, Data: []byte("y")}) }),
	} {
		if err := c.Step(m); !errors.Is(err, raft.ErrInvalidMessage) {
			t.Errorf("%s: Step(%v) = %v, want ErrInvalidMessage", name, m, err)
		}
	}
}

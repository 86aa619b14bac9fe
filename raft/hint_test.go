package raft_test

// The leader-gone hint (Core.ReportPeerGone), claim by claim as its doc
// comment states them. It is coord's own input, not the paper's; the
// safety argument is in docs/raft.md ("Where coord differs").

import (
	"testing"

	"coord/raft"
	"coord/raft/rafttest"
)

// hinted returns node id of voters following leader 1 in term 2, with
// pre-vote and check-quorum on (coord's defaults), having just heard its
// heartbeat.
func hinted(t *testing.T, id uint64, voters []uint64, tweak func(*raft.Config)) *peer {
	t.Helper()
	p := newPeer(t, id, voters, raft.HardState{Term: 2}, nil, func(c *raft.Config) {
		c.PreVote, c.CheckQuorum = true, true
		if tweak != nil {
			tweak(c)
		}
	})
	p.step(raft.Message{Type: raft.MsgHeartbeatRequest, From: 1, Term: 2})
	if st := p.status(); st.Lead != 1 {
		t.Fatalf("node %d follows %d, want 1", id, st.Lead)
	}
	return p
}

func (p *peer) gone(id uint64) []raft.Message {
	p.core.ReportPeerGone(id)
	return p.flush()
}

// "it stops counting id as a live leader ... the first [voter in turn]
// campaigns at once": with pre-vote, so no term changes.
func TestPeerGoneFirstVoterCampaignsAtOnce(t *testing.T) {
	p := hinted(t, 2, three, nil)
	msgs := ofType(p.gone(1), raft.MsgPreVoteRequest)
	if len(msgs) != 2 || msgs[0].Term != 3 {
		t.Fatalf("after the hint node 2 sent %v, want pre-vote requests for term 3 to 1 and 3", msgs)
	}
	if st := p.status(); st.Role != raft.PreCandidate || st.Term != 2 || st.Lead != 0 {
		t.Fatalf("after the hint: %v at term %d, leader %d; want a pre-candidate at term 2 with no leader", st.Role, st.Term, st.Lead)
	}
}

// "the k-th [campaigns] after k ticks if it has heard from no leader by
// then", and it answers votes at once.
func TestPeerGoneVotersTakeTurnsByID(t *testing.T) {
	five := []uint64{1, 2, 3, 4, 5}
	p := hinted(t, 5, five, nil) // after 2, 3 and 4: its turn comes after 4 ticks
	if msgs := p.gone(1); len(msgs) != 0 {
		t.Fatalf("node 5 (fourth in turn) sent %v at once, want nothing", msgs)
	}
	if st := p.status(); st.Lead != 0 || st.Role != raft.Follower {
		t.Fatalf("after the hint: %v, leader %d; want a follower with no leader", st.Role, st.Lead)
	}
	vote := p.step(raft.Message{Type: raft.MsgPreVoteRequest, From: 2, Term: 3, LogIndex: 1, LogTerm: 1})
	if len(vote) != 1 || vote[0].Reject {
		t.Fatalf("node 5 answered node 2's pre-vote with %v, want a grant: it no longer counts node 1 as live", vote)
	}
	if msgs := p.tick(3); len(msgs) != 0 {
		t.Fatalf("node 5 (fourth in turn) campaigned after 3 ticks (%v), want after 4", msgs)
	}
	if msgs := ofType(p.tick(1), raft.MsgPreVoteRequest); len(msgs) != 4 {
		t.Fatalf("after its 4 ticks node 5 sent %v, want pre-vote requests to the 4 others", msgs)
	}

	q := hinted(t, 5, five, nil)
	q.gone(1)
	q.tick(3)
	q.step(raft.Message{Type: raft.MsgHeartbeatRequest, From: 2, Term: 3})
	if msgs := q.tick(1); len(msgs) != 0 {
		t.Fatalf("node 5 campaigned in its turn though a new leader spoke: %v", msgs)
	}
}

// "A hint is taken once per leader and term".
func TestPeerGoneOncePerLeaderAndTerm(t *testing.T) {
	p := hinted(t, 2, three, nil)
	p.gone(1)
	p.step(raft.Message{Type: raft.MsgHeartbeatRequest, From: 1, Term: 2}) // a false hint: node 1 lives
	if st := p.status(); st.Role != raft.Follower || st.Lead != 1 {
		t.Fatalf("after the leader's heartbeat: %v following %d, want a follower of 1", st.Role, st.Lead)
	}
	if msgs := p.gone(1); len(msgs) != 0 || p.status().Lead != 1 {
		t.Fatalf("a second hint in term 2 sent %v and left leader %d; want nothing and leader 1", msgs, p.status().Lead)
	}
	p.step(raft.Message{Type: raft.MsgHeartbeatRequest, From: 1, Term: 3})
	if msgs := ofType(p.gone(1), raft.MsgPreVoteRequest); len(msgs) != 2 {
		t.Fatalf("a hint in the leader's next term sent %v, want a campaign", msgs)
	}
}

// "only by a follower of id; any other is ignored".
func TestPeerGoneIgnoredUnlessFromTheLeaderFollowed(t *testing.T) {
	p := hinted(t, 2, three, nil)
	if msgs := p.gone(3); len(msgs) != 0 || p.status().Lead != 1 {
		t.Fatalf("a follower's close sent %v and left leader %d; want nothing, leader 1", msgs, p.status().Lead)
	}
	l := newPeer(t, 1, three, raft.HardState{Term: 2}, nil, func(c *raft.Config) { c.CheckQuorum = true })
	l.lead(three)
	term := l.status().Term
	if msgs := l.gone(2); len(msgs) != 0 || l.status().Role != raft.Leader || l.status().Term != term {
		t.Fatalf("the leader took a follower's close: sent %v, now %+v", msgs, l.status().SoftState)
	}
	c := newPeer(t, 2, three, raft.HardState{Term: 2}, nil, func(c *raft.Config) { c.PreVote, c.CheckQuorum = true, true })
	c.core.Campaign()
	c.flush()
	if msgs := c.gone(1); len(msgs) != 0 || c.status().Role != raft.PreCandidate {
		t.Fatalf("a pre-candidate took a hint: sent %v, now %v", msgs, c.status().Role)
	}
}

// "the pre-vote requests it ignored since it last heard from id
// included": a request that came before the hint is answered by it. And
// the first voter in turn that granted one does not campaign against the
// node it just granted: it waits for its election timeout.
func TestPeerGoneAnswersThePreVotesItIgnored(t *testing.T) {
	p := hinted(t, 2, three, nil)
	req := raft.Message{Type: raft.MsgPreVoteRequest, From: 3, Term: 3, LogIndex: 1, LogTerm: 1}
	if msgs := p.step(req); len(msgs) != 0 {
		t.Fatalf("while it hears leader 1, node 2 answered a pre-vote with %v; want it ignored (check-quorum)", msgs)
	}
	msgs := p.gone(1)
	if len(msgs) != 1 || msgs[0].Type != raft.MsgPreVoteResponse || msgs[0].To != 3 || msgs[0].Reject || msgs[0].Term != 3 {
		t.Fatalf("the hint sent %v, want node 3's pre-vote granted and no campaign of node 2's own", msgs)
	}
	cfg := rafttest.DefaultConfig(2)
	if n := electionTicks(p, 3*cfg.ElectionTicks); n < cfg.ElectionTicks {
		t.Fatalf("after granting node 3 a pre-vote, node 2 campaigned after %d ticks, want its election timeout (>= %d)", n, cfg.ElectionTicks)
	}
}

// The requests ignored while the leader was heard are forgotten when it
// speaks again: it was live then, and a later hint grants nothing stale.
func TestPeerGoneForgetsPreVotesIgnoredBeforeTheLeaderSpoke(t *testing.T) {
	p := hinted(t, 3, three, nil)
	p.step(raft.Message{Type: raft.MsgPreVoteRequest, From: 2, Term: 3, LogIndex: 1, LogTerm: 1})
	p.step(raft.Message{Type: raft.MsgHeartbeatRequest, From: 1, Term: 2})
	if msgs := p.gone(1); len(msgs) != 0 {
		t.Fatalf("the hint answered a request from before the leader's last heartbeat: %v", msgs)
	}
}

// "A follower whose campaign fails waits for its election timeout as
// usual."
func TestPeerGoneFailedCampaignWaitsForTheTimeout(t *testing.T) {
	five := []uint64{1, 2, 3, 4, 5}
	p := hinted(t, 2, five, nil)
	p.gone(1)
	for _, from := range []uint64{3, 4, 5} {
		p.step(raft.Message{Type: raft.MsgPreVoteResponse, From: from, Term: 2, Reject: true})
	}
	if st := p.status(); st.Role != raft.Follower || st.Term != 2 {
		t.Fatalf("refused by a majority: %v at term %d, want a follower at term 2", st.Role, st.Term)
	}
	cfg := rafttest.DefaultConfig(2)
	if n := electionTicks(p, 3*cfg.ElectionTicks); n < cfg.ElectionTicks {
		t.Fatalf("after the failed campaign node 2 campaigned again after %d ticks, want a full election timeout (>= %d)", n, cfg.ElectionTicks)
	}
}

// "Without PreVote the hint only forgets the leader".
func TestPeerGoneWithoutPreVoteOnlyForgetsTheLeader(t *testing.T) {
	p := hinted(t, 2, three, func(c *raft.Config) { c.PreVote = false })
	if msgs := p.gone(1); len(msgs) != 0 {
		t.Fatalf("without pre-vote the hint sent %v, want nothing", msgs)
	}
	if st := p.status(); st.Term != 2 || st.Lead != 0 || st.Role != raft.Follower {
		t.Fatalf("without pre-vote: %v at term %d, leader %d; want a follower at term 2 with no leader", st.Role, st.Term, st.Lead)
	}
	vote := p.step(raft.Message{Type: raft.MsgVoteRequest, From: 3, Term: 3, LogIndex: 1, LogTerm: 1})
	if len(vote) != 1 || vote[0].Reject {
		t.Fatalf("node 2 answered a vote request with %v, want a grant", vote)
	}
}

// "a false hint costs a round of messages, not leadership": in a healthy
// cluster, every follower but one hinted in turn, the leader and its term
// stand.
func TestPeerGoneFalseHintCostsNoLeadership(t *testing.T) {
	n := cluster(t, 1, 2, 3, 4, 5)
	elect(t, n, 1)
	before := n.Nodes[1].Core.Status()
	for _, id := range []uint64{2, 3} {
		nd := n.Nodes[id]
		nd.Handler.ReportPeerGone(1)
		if err := nd.Handler.Handle(); err != nil {
			t.Fatal(err)
		}
	}
	mustStabilize(t, n)
	for range 30 {
		for _, id := range n.IDs() {
			if err := n.Tick(id, 1); err != nil {
				t.Fatal(err)
			}
		}
		mustStabilize(t, n)
	}
	after := n.Nodes[1].Core.Status()
	if after.Role != raft.Leader || after.Term != before.Term {
		t.Fatalf("after false hints to two of five nodes: node 1 is %v at term %d, was leader at %d", after.Role, after.Term, before.Term)
	}
	for _, id := range n.IDs() {
		if st := n.Nodes[id].Core.Status(); st.Lead != 1 || st.Term != before.Term {
			t.Errorf("node %d follows %d at term %d, want 1 at %d", id, st.Lead, st.Term, before.Term)
		}
	}
}

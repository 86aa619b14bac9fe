package raft_test

import (
	"testing"

	"coord/raft"
	"coord/raft/rafttest"
)

// lostTail builds a cluster of three whose follower 3 acknowledged the
// whole log, then restarts 3 from a copy of its storage that lost the last
// lost entries and the hard state that went with them: what a disk does
// when it drops synced data. It returns the network, with 1 leading, and
// the commit index 3 had acknowledged.
func lostTail(t *testing.T, lost int) (*rafttest.Network, uint64) {
	t.Helper()
	n := cluster(t, 1, 2, 3)
	leader := elect(t, n, 1)
	for i := range 6 {
		if _, _, err := leader.Core.Propose([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		mustStabilize(t, n)
	}
	victim, err := n.Node(3)
	if err != nil {
		t.Fatal(err)
	}
	acked := victim.Core.Status().LastIndex
	if commit := leader.Core.Status().Commit; commit != acked {
		t.Fatalf("leader commit %d, follower 3 last index %d: want the follower to hold the whole committed log", commit, acked)
	}
	keep := acked - uint64(lost)
	ents, err := victim.Storage.Entries(1, keep+1, 0)
	if err != nil {
		t.Fatal(err)
	}
	hs := victim.Storage.HardState()
	damaged := raft.NewMemoryStorage()
	if err := damaged.Append(ents); err != nil {
		t.Fatal(err)
	}
	if err := damaged.SetHardState(raft.HardState{Term: hs.Term, Vote: hs.Vote, Commit: min(hs.Commit, keep)}); err != nil {
		t.Fatal(err)
	}
	if err := n.Crash(3); err != nil {
		t.Fatal(err)
	}
	victim.Storage = damaged
	if err := n.Restart(3); err != nil {
		t.Fatal(err)
	}
	return n, acked
}

// A leader's heartbeat carrying a commit index past the follower's last
// index is a disk that lost synced entries: reported in Status, never an
// assertion (which crash-looped the node on every restart).
func TestCommitBeyondLastIndexIsReportedNotAsserted(t *testing.T) {
	n, acked := lostTail(t, 3)
	if err := n.Tick(1, 1); err != nil { // a heartbeat
		t.Fatal(err)
	}
	mustStabilize(t, n)
	victim, _ := n.Node(3)
	st := victim.Core.Status()
	want := raft.LogLost{Leader: 1, Term: st.Term, Commit: acked, LastIndex: acked - 3}
	if st.LogLost == nil || *st.LogLost != want {
		t.Fatalf("LogLost %+v, want %+v", st.LogLost, want)
	}
	if st.Commit > st.LastIndex {
		t.Fatalf("commit %d beyond last index %d", st.Commit, st.LastIndex)
	}
}

// A node that lost acknowledged entries refuses votes and pre-votes, even
// from a candidate with a longer log in a later term: it cannot tell what
// was committed, and its vote might elect a leader without it.
func TestLogLostRefusesVotesAndDoesNotCampaign(t *testing.T) {
	n, _ := lostTail(t, 2)
	if err := n.Tick(1, 1); err != nil {
		t.Fatal(err)
	}
	mustStabilize(t, n)
	victim, _ := n.Node(3)
	st := victim.Core.Status()
	if st.LogLost == nil {
		t.Fatal("loss not detected")
	}
	for _, typ := range []raft.MessageType{raft.MsgPreVoteRequest, raft.MsgVoteRequest} {
		m := raft.Message{Type: typ, From: 2, To: 3, Term: st.Term + 5, LogIndex: 1000, LogTerm: st.Term + 4, Transfer: true}
		if err := victim.Core.Step(m); err != nil {
			t.Fatal(err)
		}
		msgs := sent(t, victim.Core, victim.Storage)
		if len(msgs) != 1 || !msgs[0].Reject {
			t.Fatalf("%v from a candidate with a longer log: answered %v, want one rejection", typ, msgs)
		}
	}
	term := victim.Core.Status().Term
	victim.Core.Campaign()
	for range 50 {
		victim.Core.Tick()
	}
	if msgs := sent(t, victim.Core, victim.Storage); len(msgs) != 0 || victim.Core.Status().Term != term {
		t.Fatalf("a node that lost its log campaigned: sent %v, term %d -> %d", msgs, term, victim.Core.Status().Term)
	}
}

// A new leader probes back to where the follower's log ends and sends the
// lost entries again; once the follower holds them, it votes and applies
// as before.
func TestLogLostClearsWhenALeaderResendsTheEntries(t *testing.T) {
	n, acked := lostTail(t, 3)
	if err := n.Tick(1, 1); err != nil {
		t.Fatal(err)
	}
	mustStabilize(t, n)
	old, _ := n.Node(1)
	if err := old.Core.TransferLeadership(2); err != nil {
		t.Fatal(err)
	}
	mustStabilize(t, n)
	leader, _ := n.Node(2)
	if st := leader.Core.Status(); st.Role != raft.Leader {
		t.Fatalf("node 2 did not take over: %v", st.Role)
	}
	if _, _, err := leader.Core.Propose([]byte("after")); err != nil {
		t.Fatal(err)
	}
	mustStabilize(t, n)
	victim, _ := n.Node(3)
	st := victim.Core.Status()
	if st.LogLost != nil {
		t.Fatalf("still LogLost %+v after the new leader resent the log (last index %d)", st.LogLost, st.LastIndex)
	}
	if st.LastIndex <= acked || st.Commit != leader.Core.Status().Commit {
		t.Fatalf("follower at last %d commit %d, leader commit %d", st.LastIndex, st.Commit, leader.Core.Status().Commit)
	}
}

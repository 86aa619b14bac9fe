package raft

import "testing"

// A leader remembers the answers to the last maxAnsweredRequests proposal
// requests, no more: the oldest is forgotten as a new one comes.
func TestAnsweredRequestsAreBounded(t *testing.T) {
	cfg := validConfig()
	cfg.Peers = []uint64{1, 2, 3}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.becomeCandidate()
	r.becomeLeader()
	n := maxAnsweredRequests + 10
	for i := 1; i <= n; i++ {
		m := Message{Type: MsgProposalRequest, From: 2, To: 1, Term: r.term, ReadRound: uint64(i),
			Entries: []Entry{{Type: EntryNormal, Data: []byte("x")}}}
		if err := r.Step(m); err != nil {
			t.Fatal(err)
		}
		r.msgs = nil
	}
	if got := len(r.forwards.answered); got != maxAnsweredRequests {
		t.Fatalf("%d answers remembered after %d requests, want %d", got, n, maxAnsweredRequests)
	}
	for i := 1; i <= n; i++ {
		_, ok := r.forwards.answered[requestKey{2, uint64(i)}]
		if want := i > n-maxAnsweredRequests; ok != want {
			t.Fatalf("request %d remembered: %v, want %v", i, ok, want)
		}
	}
}

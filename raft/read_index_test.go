package raft_test

import (
	"errors"
	"testing"

	"coord/node"
	"coord/raft"
	"coord/raft/rafttest"
)

// followerRead starts read id on follower 2 of a cluster led by 1 and
// returns the request it sent, taken off the queue, and the read's result
// once it has one.
func followerRead(t *testing.T, n *rafttest.Network, id uint64) (raft.Message, func() (node.Result, bool)) {
	t.Helper()
	var res node.Result
	answered := false
	follower := mustNode(t, n, 2)
	if err := follower.Handler.ReadIndex(id, func(r node.Result) { res, answered = r, true }); err != nil {
		t.Fatal(err)
	}
	if err := follower.Handler.Handle(); err != nil {
		t.Fatal(err)
	}
	var req raft.Message
	for i, m := range n.Queue {
		if m.Type == raft.MsgReadIndexRequest {
			req = m
			n.Queue = append(n.Queue[:i:i], n.Queue[i+1:]...)
			break
		}
	}
	if req.Type != raft.MsgReadIndexRequest || req.To != 1 || req.ReadRound == 0 {
		t.Fatalf("follower sent %v, want a read index request to the leader", req)
	}
	return req, func() (node.Result, bool) { return res, answered }
}

// A refusal from the leader fails the follower's read at once, with an
// error the caller can retry on.
func TestFollowerReadRefusedIsDropped(t *testing.T) {
	n := cluster(t, 1, 2, 3)
	elect(t, n, 1)
	req, result := followerRead(t, n, 42)
	refusal := raft.Message{Type: raft.MsgReadIndexResponse, From: 1, To: 2, Term: req.Term, ReadRound: req.ReadRound, Reject: true}
	if err := n.Inject(refusal); err != nil {
		t.Fatal(err)
	}
	res, ok := result()
	if !ok || !errors.Is(res.Err, raft.ErrNotLeader) {
		t.Fatalf("read after a refusal: answered %t with %+v, want ErrNotLeader", ok, res)
	}
}

// A follower takes an answer only to a request it sent in this run: an
// answer numbered past its last request or before its first (an earlier
// run's, delayed across a restart) is ignored, not taken as a
// confirmation of the reads waiting now.
func TestFollowerReadIgnoresAnswersToOtherRequests(t *testing.T) {
	n := cluster(t, 1, 2, 3)
	elect(t, n, 1)
	req, result := followerRead(t, n, 42)
	for _, round := range []uint64{req.ReadRound + 1, req.ReadRound - 1} {
		answer := raft.Message{Type: raft.MsgReadIndexResponse, From: 1, To: 2, Term: req.Term, ReadRound: round, LogIndex: 1}
		if err := n.Inject(answer); err != nil {
			t.Fatal(err)
		}
		if res, ok := result(); ok {
			t.Fatalf("answer to request %d (sent: %d) answered the read: %+v", round, req.ReadRound, res)
		}
	}
	// The real request, delivered, is answered at the leader's commit index.
	n.Queue = append(n.Queue, req)
	mustStabilize(t, n)
	res, ok := result()
	if commit := mustNode(t, n, 1).Core.Status().Commit; !ok || res.Err != nil || res.Index != commit {
		t.Fatalf("read answered %t with %+v, want index %d", ok, res, commit)
	}
}

// A follower that knows no leader cannot ask one: ErrNotLeader, as before.
func TestFollowerWithoutLeaderRefusesReads(t *testing.T) {
	n := cluster(t, 1, 2, 3)
	follower := mustNode(t, n, 2)
	if err := follower.Core.ReadIndex(1); !errors.Is(err, raft.ErrNotLeader) {
		t.Fatalf("ReadIndex with no leader = %v, want ErrNotLeader", err)
	}
}

package server

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// newSlowElectionCluster is newTestCluster with an election timeout of
// 100 ticks (2-4 s at the test clusters' 20 ms tick), so that a leadership
// transfer to a node that does not answer stays in progress, and the
// leader refuses proposals, for 2 s.
func newSlowElectionCluster(t *testing.T, size int) *testCluster {
	c := &testCluster{t: t, peers: map[uint64]string{}, https: map[uint64]net.Listener{}, nodes: map[uint64]*testNode{}}
	raftListeners := map[uint64]net.Listener{}
	for id := uint64(1); id <= uint64(size); id++ {
		raftListeners[id] = freeListener(t)
		c.peers[id] = raftListeners[id].Addr().String()
		c.https[id] = freeListener(t)
	}
	for id := uint64(1); id <= uint64(size); id++ {
		c.start(id, raftListeners[id], t.TempDir(), func(cfg *Config) { cfg.ElectionTicks = 100 })
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.stop()
		}
	})
	return c
}

// A write through a follower that its leader refuses (here, during a
// leadership transfer) is answered at once: unavailable, naming the node
// to go to (the transfer's target) in the body and in Coord-Leader, since
// it was appended nowhere; it never applies. Before the leader answered
// forwarded proposals, the follower waited for the client's deadline.
func TestFollowerWriteRefusedDuringATransferIsUnavailableNamingTheTarget(t *testing.T) {
	c := newSlowElectionCluster(t, 3)
	leader := c.waitLeader()
	var target, f *testNode
	for id, n := range c.nodes {
		switch {
		case id == leader:
		case target == nil:
			target = n
		default:
			f = n
		}
	}
	waitPeerConnected(t, f, leader)
	propose(t, c, Command{Op: OpPut, Key: "warm", Value: []byte("x")})
	// The target is down: the transfer stays in progress until the
	// leader abandons it after an election timeout.
	targetID := target.id
	c.crash(targetID)
	if err := c.nodes[leader].shell.TransferLeadership(context.Background(), targetID); err != nil {
		t.Fatal(err)
	}
	r := callAs(t, "PUT", f.httpURL+"/v1/kv/refused", "", "1")
	if r.code != http.StatusServiceUnavailable || r.body["code"] != "unavailable" {
		t.Fatalf("PUT through follower %d during a transfer to %d: %d %v, want 503 unavailable", f.id, targetID, r.code, r.body)
	}
	if got, _ := r.body["leader"].(float64); uint64(got) != targetID {
		t.Fatalf("refusal names leader %v, want the transfer's target %d: %v", r.body["leader"], targetID, r.body)
	}
	if got := r.header.Get("Coord-Leader"); got != strconv.FormatUint(targetID, 10) {
		t.Fatalf("refusal's Coord-Leader is %q, want %d", got, targetID)
	}
	// Once the transfer is abandoned the leader takes writes again; the
	// refused one never applies.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.nodes[leader].Propose(context.Background(), Command{Op: OpPut, Key: "after", Value: []byte("x")})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader never took a write after the transfer: %v", err)
		}
		select {
		case <-c.nodes[leader].StatusChanged():
		case <-time.After(100 * time.Millisecond): // the transfer ends on a tick, which changes no status
		}
	}
	for _, n := range c.nodes {
		waitApplied(t, n, 30*time.Second, "the write after", func(v View) bool { _, ok := v.Get("after"); return ok })
		n.View(func(v View) {
			if _, ok := v.Get("refused"); ok {
				t.Errorf("node %d applied the refused write", n.id)
			}
		})
	}
}

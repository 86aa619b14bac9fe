package server

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coord/raft"
	"coord/storage/vfs"
)

// A node a leader told to campaign (TimeoutNow, in a hand-over) holds a
// write that reaches it while its term and vote are still being written,
// when its status still names the old leader: the write is appended with
// the new leader's first entry. Taken for a follower's write, it went to
// the old leader, which refuses writes while it hands over and names this
// node: the client went round the cluster while the election ended.
//
// The followers' writes of a vote hang from the hand-over on, so the
// target's status stays the old one while the write comes; the old
// leader's vote and its own make it leader once they work again.
func TestWriteHeldWhileTheCampaignIsUnpublished(t *testing.T) {
	var leaderID atomic.Uint64 // the votes of the other nodes hang, once set
	entered := map[uint64]chan struct{}{}
	for id := uint64(1); id <= 3; id++ {
		entered[id] = make(chan struct{}, 1)
	}
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock()
	c := newTestClusterFS(t, 3, false, func(id uint64) vfs.FS {
		return vfs.NewFaultFS(vfs.OS, id, func(op vfs.Op) vfs.Fault {
			if l := leaderID.Load(); l != 0 && l != id && op.Kind == vfs.OpSync && filepath.Base(op.Name) == "VOTE" {
				select {
				case entered[id] <- struct{}{}:
				default:
				}
				<-release
			}
			return vfs.NoFault
		})
	})
	t.Cleanup(unblock) // before the nodes stop (cleanups run last first)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	propose(t, c, Command{Op: OpPut, Key: "before", Value: []byte("x")})
	leader := c.waitLeader()
	c.waitQuiet(ctx, leader)
	leaderID.Store(leader)

	old := c.nodes[leader].Node
	campaigning := make(chan uint64, 1)
	handedOver := make(chan error, 1)
	go func() {
		_, err := old.handOver(ctx, func(to uint64) { campaigning <- to })
		handedOver <- err
	}()
	var target uint64
	select {
	case target = <-campaigning:
	case <-ctx.Done():
		t.Fatal("the target never campaigned")
	}
	select {
	case <-entered[target]:
	case <-ctx.Done():
		t.Fatal("the target never wrote its term and vote")
	}
	tn := c.nodes[target].Node
	if lead := tn.shell.Lead(); lead != leader {
		t.Fatalf("the target's status names leader %d while it writes its vote; the test wants the old leader %d", lead, leader)
	}
	// Once the write is on its way to the loop (or answered), the disks
	// work again.
	onItsWay := make(chan struct{})
	tn.electionProposed = func() { close(onItsWay) }
	type outcome struct {
		res      Result
		proposed bool
		err      error
	}
	answered := make(chan outcome, 1)
	go func() {
		res, proposed, err := tn.ProposeAtElection(ctx, Command{Op: OpPut, Key: "during", Value: []byte("y")})
		answered <- outcome{res, proposed, err}
	}()
	var got outcome
	select {
	case <-onItsWay:
		unblock()
		got = <-answered
	case got = <-answered:
		unblock()
	}
	if !got.proposed || got.err != nil || got.res.Status != StatusOK {
		t.Fatalf("write to the campaigning target: proposed %v, %+v, %v; want it held and applied", got.proposed, got.res, got.err)
	}
	if err := <-handedOver; err != nil {
		t.Fatalf("handOver: %v", err)
	}
	if l := c.waitLeader(); l != target {
		t.Fatalf("leader %d, want the target %d", l, target)
	}
	waitApplied(t, c.nodes[target], 10*time.Second, "the held write applied", func(v View) bool {
		kv, ok := v.Get("during")
		return ok && string(kv.Value) == "y"
	})
}

// waitQuiet waits until every node has applied all the leader wrote,
// so that none has anything left to write to its disk.
func (c *testCluster) waitQuiet(ctx context.Context, leader uint64) {
	c.t.Helper()
	for {
		var changed []<-chan struct{}
		for _, n := range c.nodes {
			changed = append(changed, n.shell.Changed())
		}
		last := c.nodes[leader].shell.Status().LastIndex
		quiet := true
		for _, n := range c.nodes {
			st := n.shell.Status()
			if st.Role == raft.Candidate || st.Commit < last || st.Applied < last || st.LastIndex != last {
				quiet = false
			}
		}
		if quiet {
			return
		}
		deadline := time.After(30 * time.Second)
		if !waitAny(changed, deadline) || ctx.Err() != nil {
			c.t.Fatal("the nodes did not all apply the leader's log within 30s")
		}
	}
}

package server

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coord/api"
	"coord/raft"
	"coord/storage/vfs"
)

// A node a leader told to campaign (TimeoutNow, in a hand-over) holds a
// write that reaches it while its term and vote are still being written,
// when its status still names the old leader: the write is appended with
// the new leader's first entry. Taken for a follower's write, it went to
// the old leader, which refuses writes while it hands over and names this
// node: the client went round the cluster while the election ended.
func TestWriteHeldWhileTheCampaignIsUnpublished(t *testing.T) {
	h := startUnpublishedCampaign(t)
	type outcome struct {
		res      Result
		proposed bool
		err      error
	}
	got := whileCampaigning(h, func() outcome {
		res, proposed, err := h.target.ProposeAtElection(h.ctx, Command{Op: OpPut, Key: "during", Value: []byte("y")})
		return outcome{res, proposed, err}
	})
	if !got.proposed || got.err != nil || got.res.Status != StatusOK {
		t.Fatalf("write to the campaigning target: proposed %v, %+v, %v; want it held and applied", got.proposed, got.res, got.err)
	}
	h.tookOver(t)
}

// The answer to a write a candidate held names the leader the election
// made (Coord-Leader), not the one the node's status named when the write
// came: a client follows that header even on a success, and after a
// hand-over it named the stopped leader, where the client's next write
// found nothing listening.
func TestWriteHeldByTheCandidateNamesTheNewLeader(t *testing.T) {
	h := startUnpublishedCampaign(t)
	type outcome struct {
		status int
		leader string
		err    error
	}
	got := whileCampaigning(h, func() outcome {
		req, err := http.NewRequestWithContext(h.ctx, "PUT", h.c.nodes[h.targetID].httpURL+"/v1/kv/during", strings.NewReader("y"))
		if err != nil {
			return outcome{err: err}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return outcome{err: err}
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return outcome{status: resp.StatusCode, leader: resp.Header.Get(api.HeaderLeader)}
	})
	if got.err != nil || got.status != http.StatusOK || got.leader != strconv.FormatUint(h.targetID, 10) {
		t.Fatalf("write to the campaigning target: %d, Coord-Leader %q, %v; want 200 naming node %d (the old leader was %d)",
			got.status, got.leader, got.err, h.targetID, h.leaderID)
	}
	h.tookOver(t)
}

// A renewal that reaches the target then waits for the election's outcome
// too (AwaitElection), as a write is held: it returned at once, with the
// status naming the old leader, and the renewal went there and back.
func TestAwaitElectionWhileTheCampaignIsUnpublished(t *testing.T) {
	h := startUnpublishedCampaign(t)
	awaited := make(chan struct{})
	h.target.electionAwaited = func() { close(awaited) }
	returned := make(chan uint64, 1)
	go func() {
		h.target.AwaitElection(h.ctx)
		returned <- h.target.shell.Lead()
	}()
	select {
	case <-awaited:
		h.unblock()
	case lead := <-returned:
		h.unblock()
		t.Fatalf("AwaitElection returned at once, the status naming leader %d, while the target (%d) wrote its vote", lead, h.targetID)
	}
	if lead := <-returned; lead != h.targetID {
		t.Fatalf("AwaitElection returned with leader %d, want the target %d, which won", lead, h.targetID)
	}
	if err := <-h.handedOver; err != nil {
		t.Fatalf("handOver: %v", err)
	}
}

// whileCampaigning runs write on a goroutine while the target's vote is
// being written, lets the vote through once the write is on its way to
// be held (or answered already), and returns what write returned.
func whileCampaigning[T any](h *unpublishedCampaign, write func() T) T {
	answered := make(chan T, 1)
	go func() { answered <- write() }()
	select {
	case <-h.onItsWay:
		h.unblock()
		return <-answered
	case got := <-answered:
		h.unblock()
		return got
	}
}

// unpublishedCampaign is a cluster whose leader hands over to a target
// that is writing its term and vote (the write hangs until unblock), its
// status still naming the old leader. onItsWay is closed when the target
// takes a write to its loop to be held for the election.
type unpublishedCampaign struct {
	ctx                context.Context
	c                  *testCluster
	leaderID, targetID uint64
	target             *Node
	unblock            func()
	onItsWay           chan struct{}
	handedOver         chan error
}

// startUnpublishedCampaign starts a 3-node cluster, lets it write a first
// entry everywhere, and hands over with the followers' writes of a vote
// hanging: the target's status stays the old one while a test's write
// comes; the old leader's vote and its own make it leader once unblock
// lets the writes through.
func startUnpublishedCampaign(t *testing.T) *unpublishedCampaign {
	var leaderID atomic.Uint64 // the votes of the other nodes hang, once set
	entered := map[uint64]chan struct{}{}
	for id := uint64(1); id <= 3; id++ {
		entered[id] = make(chan struct{}, 1)
	}
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
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
	t.Cleanup(cancel)
	propose(t, c, Command{Op: OpPut, Key: "before", Value: []byte("x")})
	leader := c.waitLeader()
	c.waitQuiet(ctx, leader)
	leaderID.Store(leader)

	h := &unpublishedCampaign{ctx: ctx, c: c, leaderID: leader, unblock: unblock,
		onItsWay: make(chan struct{}), handedOver: make(chan error, 1)}
	campaigning := make(chan uint64, 1)
	go func() {
		_, err := c.nodes[leader].handOver(ctx, func(to uint64) { campaigning <- to })
		h.handedOver <- err
	}()
	select {
	case h.targetID = <-campaigning:
	case <-ctx.Done():
		t.Fatal("the target never campaigned")
	}
	select {
	case <-entered[h.targetID]:
	case <-ctx.Done():
		t.Fatal("the target never wrote its term and vote")
	}
	h.target = c.nodes[h.targetID].Node
	if lead := h.target.shell.Lead(); lead != leader {
		t.Fatalf("the target's status names leader %d while it writes its vote; the test wants the old leader %d", lead, leader)
	}
	h.target.electionProposed = func() { close(h.onItsWay) }
	return h
}

// tookOver checks that the hand-over ended with the target leading, and
// the write the test made applied there.
func (h *unpublishedCampaign) tookOver(t *testing.T) {
	t.Helper()
	if err := <-h.handedOver; err != nil {
		t.Fatalf("handOver: %v", err)
	}
	if l := h.c.waitLeader(); l != h.targetID {
		t.Fatalf("leader %d, want the target %d", l, h.targetID)
	}
	waitApplied(t, h.c.nodes[h.targetID], 10*time.Second, "the held write applied", func(v View) bool {
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

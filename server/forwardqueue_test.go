package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
	"weak"

	"coord/node"
)

// A forwarded write whose caller gives up before the follower's loop took
// it from the queue went nowhere: the caller gets its context's error, not
// unknown_outcome, and no node ever applies it; a write queued beside it
// that its caller still waits for is taken once the loop runs again, and
// applies. The follower's loop is held in a write of its disk (freezer),
// so both writes stay queued until the test releases it.
func TestForwardedWriteGivenUpWhileQueuedGoesNowhere(t *testing.T) {
	z := newFreezer()
	c, l, f := startWithPatientFollower(t, 3, z, nil)

	// The follower's loop stops in the write of the leader's next entry.
	z.freeze(f.id)
	go func() { _, _ = l.Propose(context.Background(), Command{Op: OpPut, Key: "stall", Value: []byte("x")}) }()
	z.waitBlocked(t, f.id)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	givenUp, waited := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := f.ProposeForwarded(ctx, Command{Op: OpPut, Key: "given-up", Value: []byte("1")})
		givenUp <- err
	}()
	go func() {
		_, err := f.ProposeForwarded(context.Background(), Command{Op: OpPut, Key: "waited", Value: []byte("1")})
		waited <- err
	}()
	waitCount(t, "writes queued for the follower's loop", f.sm.forwards, &f.sm.forwards.queued, 2)
	if handed := f.sm.forwards.handed.Load(); handed != 0 {
		t.Fatalf("the frozen follower's loop took %d writes", handed)
	}
	cancel()
	if err := <-givenUp; !errors.Is(err, context.Canceled) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a write given up before the loop took it: %v; want context.Canceled (it went nowhere)", err)
	}

	z.releaseAll()
	if err := <-waited; err != nil {
		t.Fatalf("the write queued beside it, once the loop ran again: %v", err)
	}
	writeEverywhere(t, c, "after")
	for id, n := range c.nodes {
		n.View(func(v View) {
			if _, ok := v.Get("given-up"); ok {
				t.Errorf("node %d applied the write given up before it went out", id)
			}
			if _, ok := v.Get("waited"); !ok {
				t.Errorf("node %d lacks the write queued beside it", id)
			}
		})
	}
}

// A forwarded write that a snapshot's failAll answered while it was still
// queued (the loop installs a snapshot, which answers every request number
// waiting, before it takes the write) goes nowhere: its caller gets
// ErrNotLeader, not the failAll's unknown_outcome, so that the API may
// send it again over HTTP, and the loop, when it comes to it, skips it.
// The follower's loop is held in a write of its disk (freezer), so the
// write stays queued; the failAll is the state machine's own, called here
// as a snapshot's install would (installing one while the write is queued
// cannot be ordered without timing).
func TestForwardedWriteFailedBySnapshotWhileQueuedGoesNowhere(t *testing.T) {
	z := newFreezer()
	c, l, f := startWithPatientFollower(t, 3, z, nil)

	z.freeze(f.id)
	go func() { _, _ = l.Propose(context.Background(), Command{Op: OpPut, Key: "stall", Value: []byte("x")}) }()
	z.waitBlocked(t, f.id)

	answer := make(chan error, 1)
	go func() {
		_, err := f.ProposeForwarded(context.Background(), Command{Op: OpPut, Key: "failed", Value: []byte("1")})
		answer <- err
	}()
	waitCount(t, "writes queued for the follower's loop", f.sm.forwards, &f.sm.forwards.queued, 1)
	f.sm.forwards.failAll(fmt.Errorf("%w: a snapshot from the leader covered a forwarded write's entry", ErrOutcomeUnknown))
	if err := <-answer; !errors.Is(err, ErrNotLeader) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a queued write a snapshot's failAll answered: %v; want ErrNotLeader (it went nowhere)", err)
	}

	z.releaseAll()
	// The feeder hands the queue over in order: once a write queued after
	// it applies everywhere, the failed write was skipped or sent before.
	if _, err := f.ProposeForwarded(ctx(t), Command{Op: OpPut, Key: "after", Value: []byte("1")}); err != nil {
		t.Fatalf("a forwarded write after it: %v", err)
	}
	for _, n := range c.nodes {
		waitApplied(t, n, 30*time.Second, "after", func(v View) bool { _, ok := v.Get("after"); return ok })
	}
	if handed := f.sm.forwards.handed.Load(); handed != 1 {
		t.Errorf("the follower's loop took %d writes, want 1 (the failed one skipped)", handed)
	}
	for id, n := range c.nodes {
		n.View(func(v View) {
			if _, ok := v.Get("failed"); ok {
				t.Errorf("node %d applied the write its caller was told went nowhere", id)
			}
		})
	}
}

// Once the node's loop has ended, a forwarded write is refused with the
// loop's error and queued nowhere: the queue no longer grows until Close
// with writes nobody takes.
func TestForwardedWriteAfterTheLoopEndedIsNotQueued(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	f := c.follower(leader)
	waitPeerConnected(t, f, leader)
	writeEverywhere(t, c, "warm")

	if err := f.shell.Stop(); err != nil {
		t.Fatalf("stopping the follower's loop: %v", err)
	}
	<-f.feedDone
	queued := f.sm.forwards.queued.Load()
	_, err := f.ProposeForwarded(ctx(t), Command{Op: OpPut, Key: "late", Value: []byte("1")})
	if !errors.Is(err, ErrStopped) {
		t.Fatalf("a forwarded write after the loop ended: %v; want ErrStopped", err)
	}
	f.forwardQueue.mu.Lock()
	pending := len(f.forwardQueue.pending)
	f.forwardQueue.mu.Unlock()
	if pending != 0 || f.sm.forwards.queued.Load() != queued {
		t.Fatalf("after the loop ended, %d writes queued (counter %d → %d); want none", pending, queued, f.sm.forwards.queued.Load())
	}
}

// When the loop takes only part of a batch (past MaxEntryBytesPerBatch of
// entry data), the feeder hands the rest back to the queue in the same
// array; the part taken must not stay in it, or each write's data (here 1
// MB) lives as long as the array, which the feeder reuses for ever. Eleven
// writes of 1 MB are queued while the follower's loop is held (freezer):
// at most five fit one batch of 4 MiB, so one batch is split. Once every
// write is answered, whatever the answer, nothing holds any of them.
func TestForwardFeederHoldsNoWriteItHandedOver(t *testing.T) {
	const (
		writes     = 11
		valueBytes = 1_000_000
	)
	z := newFreezer()
	c := newFrozenCluster(t, 3, z, func(_ uint64, cfg *Config) {
		// Elections after 1 to 2 s of silence, so that megabytes of
		// writes on a loaded machine do not elect by starvation alone;
		// if they do, a write the leader never answered is given up
		// after two election timeouts, so that every write is answered.
		cfg.ElectionTicks = 50
	})
	leader := c.waitLeader()
	l, f := c.nodes[leader], c.follower(leader)
	waitPeerConnected(t, f, leader)
	writeEverywhere(t, c, "warm")

	z.freeze(f.id)
	go func() { _, _ = l.Propose(context.Background(), Command{Op: OpPut, Key: "stall", Value: []byte("x")}) }()
	z.waitBlocked(t, f.id)

	// The writes go through the queue as ProposeForwarded's do, with no
	// request number: the test keeps no reference to them, only weak
	// ones, and waits for the handler's verdicts.
	held := make([]weak.Pointer[forwardCall], writes)
	outcomes := make([]chan forwardOutcome, writes)
	for i := range writes {
		cmd := Command{Op: OpPut, Key: fmt.Sprintf("big-%d", i), Value: bytes.Repeat([]byte{'v'}, valueBytes)}
		call := &forwardCall{data: cmd.Marshal(), outcome: make(chan forwardOutcome, forwardOutcomes), forwards: f.sm.forwards}
		call.waiter = node.ForwardWaiter{Placed: call.place, Done: call.done}
		held[i], outcomes[i] = weak.Make(call), call.outcome
		f.forwardQueue.push(call)
	}
	waitCount(t, "writes queued for the follower's loop", f.sm.forwards, &f.sm.forwards.queued, writes)
	z.releaseAll()
	for i, outcome := range outcomes {
		select {
		case o := <-outcome:
			if !o.isVerdict {
				t.Fatalf("write %d: %+v, want the handler's verdict (it has no request number)", i, o)
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("write %d never answered", i)
		}
	}
	runtime.GC()
	runtime.GC()
	var kept []int
	for i, p := range held {
		if p.Value() != nil {
			kept = append(kept, i)
		}
	}
	if len(kept) > 0 {
		t.Fatalf("writes %v are still held once answered (the feeder's batch array keeps what the loop took)", kept)
	}
}

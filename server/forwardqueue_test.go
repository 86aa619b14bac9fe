package server

import (
	"context"
	"errors"
	"testing"
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

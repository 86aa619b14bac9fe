package client

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWatchLease long-polls leases of a three-node cluster: it answers at
// once when the lease's revision is already past, and when a concurrent
// renew, release, expiry or new acquisition changes it; refused lease
// operations change nothing and do not answer it; a watch that sees
// nothing answers at its bound with the record unchanged, and one whose
// context ends answers with the context's error.
func TestWatchLease(t *testing.T) {
	cluster := startCluster(t, 3)
	c := cluster.client()
	ctx := testContext(t)

	t.Run("NeverAcquired", func(t *testing.T) {
		l, err := c.WatchLease(ctx, "fresh", 0, 200*time.Millisecond)
		if err != nil || l.Name != "fresh" || l.Holder != "" || l.Token != 0 || l.Revision != 0 {
			t.Fatalf("watch of a lease never taken: %+v %v, want free at revision 0", l, err)
		}
	})

	t.Run("AlreadyPast", func(t *testing.T) {
		got, err := c.Acquire(ctx, "past", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// A watch that waited its whole bound would outlast ctx and fail.
		for _, from := range []uint64{0, got.Revision - 1, got.Revision + 1} {
			l, err := c.WatchLease(ctx, "past", from, 10*watchForever)
			if err != nil || l.Holder != "a" || l.Token != got.Token || l.Revision != got.Revision || l.TTL != time.Minute {
				t.Fatalf("watch from %d: %+v %v, want %+v", from, l, err, got)
			}
			if l.Remaining < 0 || l.Remaining > time.Minute {
				t.Fatalf("watch from %d: remaining %v, want the leader's count within the TTL", from, l.Remaining)
			}
		}
	})

	t.Run("ConcurrentRenewAndRelease", func(t *testing.T) {
		got, err := c.Acquire(ctx, "life", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		reached := cluster.awaitLeader("/v1/watch/leases/life")
		done := watchLease(ctx, c, "life", got.Revision, watchForever)
		within(t, reached, "watch reaching the leader")
		// Refused operations go through the log but change nothing.
		if _, err := c.Acquire(ctx, "life", "b", time.Minute); !errors.Is(err, ErrHeld) {
			t.Fatalf("acquire of a held lease: %v, want held", err)
		}
		if _, err := c.Renew(ctx, "life", "a", got.Token+1, 0); !errors.Is(err, ErrLost) {
			t.Fatalf("renew with a wrong token: %v, want lost", err)
		}
		if err := c.Release(ctx, "life", "b", got.Token); !errors.Is(err, ErrLost) {
			t.Fatalf("release by another holder: %v, want lost", err)
		}
		select {
		case r := <-done:
			t.Fatalf("a refused operation answered the watch: %+v %v", r.v, r.err)
		default:
		}
		renewed, err := c.Renew(ctx, "life", "a", got.Token, 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		r := within(t, done, "watch after a renew")
		if r.err != nil || r.v.Holder != "a" || r.v.Token != got.Token || r.v.Revision != renewed.Revision || r.v.TTL != 2*time.Minute {
			t.Fatalf("watch after renew: %+v %v, want %+v", r.v, r.err, renewed)
		}

		reached = cluster.awaitLeader("/v1/watch/leases/life")
		done = watchLease(ctx, c, "life", renewed.Revision, watchForever)
		within(t, reached, "watch reaching the leader")
		if err := c.Release(ctx, "life", "a", got.Token); err != nil {
			t.Fatal(err)
		}
		r = within(t, done, "watch after a release")
		if r.err != nil || r.v.Holder != "" || r.v.Token != got.Token || r.v.Revision <= renewed.Revision {
			t.Fatalf("watch after release: %+v %v, want free, keeping token %d", r.v, r.err, got.Token)
		}

		// The next holder's tenure is a new revision and a greater token.
		reached = cluster.awaitLeader("/v1/watch/leases/life")
		done = watchLease(ctx, c, "life", r.v.Revision, watchForever)
		within(t, reached, "watch reaching the leader")
		next, err := c.Acquire(ctx, "life", "b", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		r = within(t, done, "watch after a new acquisition")
		if r.err != nil || r.v.Holder != "b" || r.v.Token != next.Token || r.v.Token <= got.Token {
			t.Fatalf("watch after acquire: %+v %v, want b's tenure %+v above token %d", r.v, r.err, next, got.Token)
		}
	})

	t.Run("Expiry", func(t *testing.T) {
		// Nobody renews: the leader expires the lease on its own clock,
		// which is a change the watch answers.
		got, err := c.Acquire(ctx, "short", "a", 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		r := within(t, watchLease(ctx, c, "short", got.Revision, watchForever), "watch of an expiring lease")
		if r.err != nil || r.v.Holder != "" || r.v.Token != got.Token || r.v.Revision <= got.Revision {
			t.Fatalf("watch of an expiring lease: %+v %v, want free, keeping token %d", r.v, r.err, got.Token)
		}
	})

	t.Run("WaitBound", func(t *testing.T) {
		got, err := c.Acquire(ctx, "steady", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, wait := range []time.Duration{0, 200 * time.Millisecond} {
			l, err := c.WatchLease(ctx, "steady", got.Revision, wait)
			if err != nil || l.Holder != "a" || l.Token != got.Token || l.Revision != got.Revision {
				t.Fatalf("watch for %v: %+v %v, want %+v", wait, l, err, got)
			}
		}
	})

	t.Run("ContextCancelled", func(t *testing.T) {
		got, err := c.Acquire(ctx, "abandoned", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		reached := cluster.awaitLeader("/v1/watch/leases/abandoned")
		done := watchLease(wctx, c, "abandoned", got.Revision, watchForever)
		within(t, reached, "watch reaching the leader")
		cancel()
		if r := within(t, done, "cancelled watch"); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled watch: %+v %v, want context.Canceled", r.v, r.err)
		}
		dctx, dcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer dcancel()
		if _, err := c.WatchLease(dctx, "abandoned", got.Revision, watchForever); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("watch past its context's deadline: %v, want context.DeadlineExceeded", err)
		}
	})

	t.Run("ThroughAFollower", func(t *testing.T) {
		f := cluster.client(cluster.follower())
		got, err := f.Acquire(ctx, "relayed", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		reached := cluster.awaitLeader("/v1/watch/leases/relayed")
		done := watchLease(ctx, f, "relayed", got.Revision, watchForever)
		within(t, reached, "forwarded watch reaching the leader")
		if err := c.Release(ctx, "relayed", "a", got.Token); err != nil {
			t.Fatal(err)
		}
		if r := within(t, done, "forwarded watch"); r.err != nil || r.v.Holder != "" || r.v.Revision <= got.Revision {
			t.Fatalf("forwarded watch: %+v %v, want the lease free", r.v, r.err)
		}
	})

	t.Run("NamesThatNeedEscaping", func(t *testing.T) {
		for _, name := range []string{"a/b", "a b", "100%", "q?x=1", "h#frag", "%2F", ".", ".."} {
			got, err := c.Acquire(ctx, name, "a", time.Minute)
			if err != nil {
				t.Fatalf("acquire %q: %v", name, err)
			}
			l, err := c.WatchLease(ctx, name, 0, watchForever)
			if err != nil || l.Name != name || l.Holder != "a" || l.Revision != got.Revision {
				t.Fatalf("watch %q: %+v %v, want %+v", name, l, err, got)
			}
			if err := c.Release(ctx, name, "a", got.Token); err != nil {
				t.Fatalf("release %q: %v", name, err)
			}
		}
	})

	t.Run("BadArguments", func(t *testing.T) {
		bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := c.WatchLease(bctx, "", 0, watchForever); !errors.Is(err, ErrInvalid) {
			t.Fatalf("watch of the empty name: %v, want invalid", err)
		}
		if _, err := c.WatchLease(bctx, "n", 0, -time.Hour); !errors.Is(err, ErrInvalid) {
			t.Fatalf("watch for a negative wait: %v, want invalid", err)
		}
	})
}

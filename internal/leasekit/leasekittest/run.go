package leasekittest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"coord/internal/assert"
	"coord/lease"
)

// waitMax bounds every wait for a state in these checks. It is generous on
// purpose: the machine is shared, and a check that fails only proves
// something when it fails for a reason other than a slow machine.
const waitMax = 30 * time.Second

// Run checks newBackend's backends against the lease.Backend contract: the
// compare-and-swap rules, tokens that grow, expiry, Watch, concurrent
// acquires through separate Backends (separate connections), bad
// arguments and Close. newBackend returns a new Backend on the same store
// each time it is called, and closes it when the test ends.
func Run(t *testing.T, newBackend func(t *testing.T) lease.Backend) {
	t.Run("AcquireRenewRelease", func(t *testing.T) { t.Parallel(); testAcquireRenewRelease(t, newBackend) })
	t.Run("ExpiryLetsAnotherIn", func(t *testing.T) { t.Parallel(); testExpiry(t, newBackend) })
	t.Run("WatchSeesChanges", func(t *testing.T) { t.Parallel(); testWatch(t, newBackend) })
	t.Run("ConcurrentAcquireOneWins", func(t *testing.T) { t.Parallel(); testConcurrentAcquire(t, newBackend) })
	t.Run("InvalidArguments", func(t *testing.T) { t.Parallel(); testInvalid(t, newBackend) })
	t.Run("Closed", func(t *testing.T) { t.Parallel(); testClosed(t, newBackend) })
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	t.Cleanup(cancel)
	return ctx
}

func testAcquireRenewRelease(t *testing.T, newBackend func(t *testing.T) lease.Backend) {
	ctx, b, name := ctxFor(t), newBackend(t), Name(t)
	rec, err := b.Get(ctx, name)
	assert.That(err == nil && rec.Free(), "Get of a new name: %+v, %v", rec, err)

	a, err := b.Acquire(ctx, name, "a", time.Minute)
	assert.That(err == nil, "Acquire: %v", err)
	assert.That(a.Holder == "a" && a.Token > 0 && a.Name == name, "Acquire returned %+v", a)
	assert.That(time.Until(a.Expiry) > 0, "Acquire expiry %v is not in the future", a.Expiry)

	got, err := b.Acquire(ctx, name, "b", time.Minute)
	assert.That(errors.Is(err, lease.ErrHeld), "Acquire of a held lease: want ErrHeld, got %v", err)
	assert.That(got.Holder == "a" && got.Token == a.Token, "ErrHeld record %+v, want holder a token %d", got, a.Token)
	_, err = b.Acquire(ctx, name, "a", time.Minute)
	assert.That(errors.Is(err, lease.ErrHeld), "Acquire by the holder itself: want ErrHeld, got %v", err)

	r, err := b.Renew(ctx, name, "a", a.Token, time.Minute)
	assert.That(err == nil && r.Token == a.Token && r.Holder == "a", "Renew: %+v, %v", r, err)
	_, err = b.Renew(ctx, name, "a", a.Token+1, time.Minute)
	assert.That(errors.Is(err, lease.ErrLost), "Renew with a wrong token: want ErrLost, got %v", err)
	_, err = b.Renew(ctx, name, "b", a.Token, time.Minute)
	assert.That(errors.Is(err, lease.ErrLost), "Renew by another holder: want ErrLost, got %v", err)
	err = b.Release(ctx, name, "b", a.Token)
	assert.That(errors.Is(err, lease.ErrLost), "Release by another holder: want ErrLost, got %v", err)

	got, err = b.Get(ctx, name)
	assert.That(err == nil && got.Holder == "a" && got.Token == a.Token, "Get while held: %+v, %v", got, err)

	assert.That(b.Release(ctx, name, "a", a.Token) == nil, "Release failed")
	got, err = b.Get(ctx, name)
	assert.That(err == nil && got.Free(), "Get after Release: %+v, %v", got, err)
	assert.That(got.Token == 0 || got.Token == a.Token, "free record's token %d: want the last issued (%d) or 0", got.Token, a.Token)
	err = b.Release(ctx, name, "a", a.Token)
	assert.That(errors.Is(err, lease.ErrLost), "second Release: want ErrLost, got %v", err)
	_, err = b.Renew(ctx, name, "a", a.Token, time.Minute)
	assert.That(errors.Is(err, lease.ErrLost), "Renew after Release: want ErrLost, got %v", err)

	c, err := b.Acquire(ctx, name, "a", time.Minute)
	assert.That(err == nil && c.Token > a.Token, "Acquire after Release: token %d after %d, %v", c.Token, a.Token, err)
	assert.That(b.Release(ctx, name, "a", c.Token) == nil, "Release failed")
}

// waitFree waits, through Watch, until name is free or held under a token
// other than token.
func waitFree(ctx context.Context, t *testing.T, b lease.Backend, name string, token uint64) lease.Record {
	t.Helper()
	ch, err := b.Watch(ctx, name)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	for rec := range ch {
		if rec.Free() || rec.Token != token {
			return rec
		}
	}
	t.Fatalf("watch of %q ended (context: %v) before token %d expired", name, ctx.Err(), token)
	return lease.Record{}
}

func testExpiry(t *testing.T, newBackend func(t *testing.T) lease.Backend) {
	ctx, name := ctxFor(t), Name(t)
	b1, b2 := newBackend(t), newBackend(t)
	a, err := b1.Acquire(ctx, name, "a", time.Second)
	assert.That(err == nil, "Acquire: %v", err)
	waitFree(ctx, t, b2, name, a.Token)

	c, err := b2.Acquire(ctx, name, "b", time.Minute)
	assert.That(err == nil && c.Token > a.Token, "Acquire after expiry: token %d after %d, %v", c.Token, a.Token, err)
	_, err = b1.Renew(ctx, name, "a", a.Token, time.Minute)
	assert.That(errors.Is(err, lease.ErrLost), "stale Renew after takeover: want ErrLost, got %v", err)
	err = b1.Release(ctx, name, "a", a.Token)
	assert.That(errors.Is(err, lease.ErrLost), "stale Release after takeover: want ErrLost, got %v", err)
	got, err := b1.Get(ctx, name)
	assert.That(err == nil && got.Holder == "b" && got.Token == c.Token, "the stale holder changed the new lease: %+v, %v", got, err)
	assert.That(b2.Release(ctx, name, "b", c.Token) == nil, "Release failed")
}

func testWatch(t *testing.T, newBackend func(t *testing.T) lease.Backend) {
	ctx, name := ctxFor(t), Name(t)
	watcher, actor := newBackend(t), newBackend(t)
	ch, err := watcher.Watch(ctx, name)
	assert.That(err == nil, "Watch: %v", err)
	next := func(what string, ok func(lease.Record) bool) lease.Record {
		t.Helper()
		for rec := range ch {
			if ok(rec) {
				return rec
			}
		}
		t.Fatalf("watch ended before %s", what)
		return lease.Record{}
	}
	first := next("the first record", func(lease.Record) bool { return true })
	assert.That(first.Free(), "first record of a new name: %+v", first)

	a, err := actor.Acquire(ctx, name, "a", time.Minute)
	assert.That(err == nil, "Acquire: %v", err)
	next("the acquire", func(r lease.Record) bool { return r.Holder == "a" && r.Token == a.Token })
	assert.That(actor.Release(ctx, name, "a", a.Token) == nil, "Release failed")
	next("the release", lease.Record.Free)

	c, err := actor.Acquire(ctx, name, "c", time.Second)
	assert.That(err == nil, "Acquire: %v", err)
	next("the second acquire", func(r lease.Record) bool { return r.Token == c.Token })
	next("the expiry", lease.Record.Free)
}

func testConcurrentAcquire(t *testing.T, newBackend func(t *testing.T) lease.Backend) {
	const contenders, rounds = 6, 5
	ctx, name := ctxFor(t), Name(t)
	backends := make([]lease.Backend, contenders)
	for i := range backends {
		backends[i] = newBackend(t)
	}
	var last uint64
	for round := range rounds {
		var wg sync.WaitGroup
		recs := make([]lease.Record, contenders)
		errs := make([]error, contenders)
		start := make(chan struct{})
		for i, b := range backends {
			wg.Go(func() {
				<-start
				recs[i], errs[i] = b.Acquire(ctx, name, fmt.Sprintf("c%d", i), time.Minute)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				assert.That(winner < 0, "round %d: two winners, c%d and c%d", round, winner, i)
				winner = i
			case !errors.Is(err, lease.ErrHeld):
				t.Fatalf("round %d: c%d: want nil or ErrHeld, got %v", round, i, err)
			}
		}
		assert.That(winner >= 0, "round %d: nobody acquired a free lease", round)
		assert.That(recs[winner].Token > last, "round %d: token %d after %d", round, recs[winner].Token, last)
		last = recs[winner].Token
		assert.That(backends[winner].Release(ctx, name, fmt.Sprintf("c%d", winner), last) == nil, "Release failed")
	}
}

func testInvalid(t *testing.T, newBackend func(t *testing.T) lease.Backend) {
	ctx, b := ctxFor(t), newBackend(t)
	_, err := b.Acquire(ctx, "", "a", time.Second)
	assert.That(errors.Is(err, lease.ErrInvalid), "empty name: %v", err)
	_, err = b.Acquire(ctx, "n", "", time.Second)
	assert.That(errors.Is(err, lease.ErrInvalid), "empty holder: %v", err)
	_, err = b.Acquire(ctx, "n", "a", 0)
	assert.That(errors.Is(err, lease.ErrInvalid), "zero TTL: %v", err)
	_, err = b.Renew(ctx, "n", "a", 0, time.Second)
	assert.That(errors.Is(err, lease.ErrInvalid), "zero token: %v", err)
	err = b.Release(ctx, "n", "a", 0)
	assert.That(errors.Is(err, lease.ErrInvalid), "zero token: %v", err)
	_, err = b.Get(ctx, "")
	assert.That(errors.Is(err, lease.ErrInvalid), "empty name: %v", err)
	_, err = b.Watch(ctx, "")
	assert.That(errors.Is(err, lease.ErrInvalid), "empty name: %v", err)
}

func testClosed(t *testing.T, newBackend func(t *testing.T) lease.Backend) {
	ctx, b, name := ctxFor(t), newBackend(t), Name(t)
	ch, err := b.Watch(ctx, name)
	assert.That(err == nil, "Watch: %v", err)
	assert.That(b.Close() == nil, "Close failed")
	for range ch { // the watch ends with the Backend
	}
	_, err = b.Acquire(ctx, name, "a", time.Second)
	assert.That(errors.Is(err, lease.ErrClosed), "Acquire after Close: %v", err)
	_, err = b.Get(ctx, name)
	assert.That(errors.Is(err, lease.ErrClosed), "Get after Close: %v", err)
	_, err = b.Watch(ctx, name)
	assert.That(errors.Is(err, lease.ErrClosed), "Watch after Close: %v", err)
	assert.That(b.Close() == nil, "second Close failed")
}

// KillHolder checks that a lease whose holder's process is killed becomes
// free again (after its TTL, or at once where the store notices the
// death), and that the next Acquire issues a greater token. It returns how
// long after the kill the lease was observed free.
func KillHolder(t *testing.T, b lease.Backend, url string, ttl time.Duration) time.Duration {
	ctx, name := ctxFor(t), Name(t)
	h := StartHolder(t, url, name, ttl)
	got, err := b.Get(ctx, name)
	assert.That(err == nil && got.Token == h.Token && !got.Free(), "Get while the holder process lives: %+v, %v", got, err)
	killed := time.Now()
	h.Kill()
	waitFree(ctx, t, b, name, h.Token)
	gap := time.Since(killed)
	c, err := b.Acquire(ctx, name, "after", time.Minute)
	assert.That(err == nil && c.Token > h.Token, "Acquire after the holder died: token %d after %d, %v", c.Token, h.Token, err)
	assert.That(b.Release(ctx, name, "after", c.Token) == nil, "Release failed")
	return gap
}

func isUnavailable(err error) bool { return errors.Is(err, lease.ErrUnavailable) }

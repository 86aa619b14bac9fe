package leasekittest

import (
	"context"
	"testing"
	"time"

	"coord/internal/assert"
	"coord/lease"
)

// WatchAcrossCut checks that a watcher whose connection is cut (by cut,
// typically a faultproxy's Cut) still ends on the latest state: its channel
// either goes on delivering, or closes, and a new Watch (what the contract
// tells a caller to do) starts from the current record. watcher reaches the
// store through the fault; actor reaches it directly.
func WatchAcrossCut(t *testing.T, watcher, actor lease.Backend, cut func()) {
	ctx, name := ctxFor(t), Name(t)
	ch, err := watcher.Watch(ctx, name)
	assert.That(err == nil, "Watch: %v", err)
	first, ok := <-ch
	assert.That(ok && first.Free(), "first record: %+v (open %v)", first, ok)

	cut()
	a, err := actor.Acquire(ctx, name, "a", time.Minute)
	assert.That(err == nil, "Acquire: %v", err)
	for {
		rec, ok := <-ch
		if ok && rec.Token == a.Token {
			break // the watch survived the cut
		}
		if ok {
			continue
		}
		// Closed: watch again, retrying while the backend reconnects.
		for {
			ch, err = watcher.Watch(ctx, name)
			if err == nil {
				break
			}
			assert.That(ctx.Err() == nil, "Watch after a cut never succeeded: %v", err)
			time.Sleep(50 * time.Millisecond) // a retry period, not a wait for a state
		}
	}
	assert.That(actor.Release(ctx, name, "a", a.Token) == nil, "Release failed")
}

// Unavailable checks that every operation of b returns an error wrapping
// lease.ErrUnavailable, and returns at all, when the store cannot be
// reached (b's connection blackholed, the server stopped): each call gets
// a context of timeout, and the check fails if any call takes longer than
// a generous bound beyond it.
func Unavailable(t *testing.T, b lease.Backend, name, holder string, token uint64, timeout time.Duration) {
	t.Helper()
	for _, op := range []struct {
		what string
		call func(context.Context) error
	}{
		{"Renew", func(ctx context.Context) error { _, err := b.Renew(ctx, name, holder, token, time.Minute); return err }},
		{"Acquire", func(ctx context.Context) error {
			_, err := b.Acquire(ctx, name, holder+"-other", time.Minute)
			return err
		}},
		{"Get", func(ctx context.Context) error { _, err := b.Get(ctx, name); return err }},
		{"Release", func(ctx context.Context) error { return b.Release(ctx, name, holder, token) }},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		done := make(chan error, 1)
		go func() { done <- op.call(ctx) }()
		select {
		case err := <-done:
			assert.That(isUnavailable(err), "%s with the store unreachable: want ErrUnavailable, got %v", op.what, err)
		case <-time.After(timeout + waitMax):
			t.Fatalf("%s with the store unreachable did not return within %v of its %v deadline", op.what, waitMax, timeout)
		}
		cancel()
	}
}

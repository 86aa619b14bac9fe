package leasetest

// Checks of a backend against faults between a client and its store, for
// backends with a network between them (PostgreSQL, Redis, etcd, Raft).
// The faults themselves come from the caller, typically an
// internal/faultproxy between the Backend and its server: cut (Proxy.Cut),
// isolate (Proxy.Blackhole(true)).

import (
	"context"
	"errors"
	"testing"
	"time"

	"coord/lease"
)

// WatchAcrossCut checks that a watcher whose connection is cut (by cut,
// typically a faultproxy's Cut) still ends on the latest state: its channel
// either goes on delivering, or closes, and a new Watch (what the contract
// tells a caller to do) starts from the current record. watcher reaches the
// store through the fault; actor reaches it directly.
func WatchAcrossCut(t *testing.T, watcher, actor lease.Backend, cut func()) {
	ctx, name := faultCtx(t), NewName()
	ch, err := watcher.Watch(ctx, name)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	first, ok := <-ch
	if !ok || !first.Free() {
		t.Fatalf("first record: %+v (open %v)", first, ok)
	}

	cut()
	a, err := actor.Acquire(ctx, name, "a", time.Minute)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
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
			if ctx.Err() != nil {
				t.Fatalf("Watch after a cut never succeeded: %v", err)
			}
			time.Sleep(50 * time.Millisecond) // a retry period, not a wait for a state
		}
	}
	if err := actor.Release(ctx, name, "a", a.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
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
			if !errors.Is(err, lease.ErrUnavailable) {
				t.Fatalf("%s with the store unreachable: want ErrUnavailable, got %v", op.what, err)
			}
		case <-time.After(timeout + faultWaitMax):
			t.Fatalf("%s with the store unreachable did not return within %v of its %v deadline", op.what, faultWaitMax, timeout)
		}
		cancel()
	}
}

// faultWaitMax bounds every wait for a state in the fault checks. It is
// generous on purpose: the machine is shared, and a check that fails only
// proves something when it fails for a reason other than a slow machine.
const faultWaitMax = 30 * time.Second

func faultCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), faultWaitMax)
	t.Cleanup(cancel)
	return ctx
}

// StepsDownWhenUnreachable checks the promise that makes an unreachable
// store safe: an Elector whose store stops answering (isolate cuts or
// blackholes leader's connection) steps down, cancelling its elected
// context, before anyone else can acquire the lease. leader reaches the
// store through the fault; other reaches it directly and acquires as soon
// as the store lets it. The check is an order of events, not a timing: the
// leader's OnLost must come before other's successful Acquire was sent.
func StepsDownWhenUnreachable(t *testing.T, leader, other lease.Backend, isolate func(), ttl time.Duration) {
	ctx, name := faultCtx(t), NewName()
	cfg := lease.ScaledConfig(ttl)
	cfg.Name, cfg.Holder = name, "isolated"
	elected := make(chan uint64, 1)
	var lostAt time.Time
	lost := make(chan error, 1)
	cfg.Callbacks = lease.Callbacks{
		OnElected: func(ctx context.Context, token uint64) { elected <- token; <-ctx.Done() },
		OnLost: func(_ uint64, err error) {
			lostAt = time.Now()
			lost <- err
		},
	}
	e, err := lease.NewElector(leader, cfg)
	if err != nil {
		t.Fatalf("NewElector: %v", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go e.Run(runCtx)
	var token uint64
	select {
	case token = <-elected:
	case <-ctx.Done():
		t.Fatal("the elector was never elected")
	}

	isolate()
	// Wait until the store lets another holder in, then take the lease.
	var acquired lease.Record
watching:
	for {
		ch, err := other.Watch(ctx, name)
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
		for rec := range ch {
			if !rec.Free() {
				continue
			}
			sent := time.Now()
			rec, err := other.Acquire(ctx, name, "other", time.Minute)
			if err == nil {
				acquired = rec
				select {
				case err := <-lost:
					if !lostAt.Before(sent) {
						t.Fatalf("the isolated leader stepped down at %v, after another holder's Acquire was sent at %v", lostAt, sent)
					}
					if !errors.Is(err, lease.ErrDeadline) {
						t.Fatalf("the isolated leader lost its lease with %v, want ErrDeadline", err)
					}
				default:
					t.Fatalf("another holder acquired token %d while the isolated leader (token %d) had not stepped down", rec.Token, token)
				}
				break watching
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the lease never became free after its leader was isolated")
		}
	}
	if acquired.Token <= token {
		t.Fatalf("token %d after %d", acquired.Token, token)
	}
}

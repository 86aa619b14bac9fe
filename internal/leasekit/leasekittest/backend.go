package leasekittest

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"coord/internal/faultproxy"
	"coord/lease"
	"coord/lease/leasetest"
)

// Open opens the Backend at the store URL raw (its package must be
// imported, to register its scheme) and closes it when the test ends. It
// fails the test if the Backend does not open.
func Open(t testing.TB, raw string) lease.Backend {
	t.Helper()
	b, err := lease.Open(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// OpenFails checks that lease.Open of each store URL in raws fails with an
// error wrapping want: lease.ErrInvalid for a URL that is wrong, or
// lease.ErrUnavailable for one whose server cannot be reached (each Open
// gets 2 s, which a refused connection needs none of).
func OpenFails(t testing.TB, want error, raws ...string) {
	t.Helper()
	for _, raw := range raws {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		b, err := lease.Open(ctx, raw)
		cancel()
		if err == nil {
			b.Close()
		}
		if !errors.Is(err, want) {
			t.Fatalf("lease.Open(%q): want %v, got %v", raw, want, err)
		}
	}
}

// Opens returns a ServerOptions.Ready probe that opens a Backend at the
// store URL raw and closes it again: a server is up when a client can
// open a Backend on it, not merely connect.
func Opens(raw string) func(context.Context) error {
	return func(ctx context.Context) error {
		b, err := lease.Open(ctx, raw)
		if err != nil {
			return err
		}
		return b.Close()
	}
}

// Proxied opens (as Open) a Backend that reaches the server of the store
// URL raw through a fault proxy of its own, closed when the test ends, and
// returns both. raw must name one host:port.
func Proxied(t testing.TB, raw string) (lease.Backend, *faultproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	return Open(t, u.String()), p
}

// RunFaults runs, as subtests, the checks of a networked Backend against
// faults between it and its server, each on Backends that reach the server
// at the store URL raw (one host:port) through a fault proxy of their own
// (see Proxied):
//   - WatchAcrossCut: a watcher whose connection is cut ends on the latest
//     state (leasetest.WatchAcrossCut);
//   - ConnectionCut: a cut connection fails the operation in flight or the
//     next one with lease.ErrUnavailable, never with a wrong answer, and the
//     one after reconnects;
//   - Blackhole: a server that stops answering (a partition) makes every
//     operation return lease.ErrUnavailable once its context is done, none
//     hangs (leasetest.Unavailable), and after the partition heals the
//     holder renews;
//   - ElectorStepsDown: an Elector whose connection is blackholed steps
//     down before the store lets anyone else in
//     (leasetest.StepsDownWhenUnreachable, with a 3 s TTL).
func RunFaults(t *testing.T, raw string) {
	t.Run("WatchAcrossCut", func(t *testing.T) {
		watcher, p := Proxied(t, raw)
		leasetest.WatchAcrossCut(t, watcher, Open(t, raw), p.Cut)
	})
	t.Run("ConnectionCut", func(t *testing.T) {
		b, p := Proxied(t, raw)
		connectionCut(t, b, p)
	})
	t.Run("Blackhole", func(t *testing.T) {
		b, p := Proxied(t, raw)
		blackholeHeals(t, b, p)
	})
	t.Run("ElectorStepsDown", func(t *testing.T) {
		leader, p := Proxied(t, raw)
		leasetest.StepsDownWhenUnreachable(t, leader, Open(t, raw), func() { p.Blackhole(true) }, 3*time.Second)
	})
}

// reconnectAttempts bounds the retries after a fault heals: each attempt is
// itself bounded by the backend's timeout.
const reconnectAttempts = 20

// connectionCut is RunFaults' ConnectionCut.
func connectionCut(t *testing.T, b lease.Backend, p *faultproxy.Proxy) {
	ctx, name := context.Background(), Name(t)
	a, err := b.Acquire(ctx, name, "a", time.Minute)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	p.Cut()
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = b.Renew(short, name, "a", a.Token, time.Minute)
	if err != nil {
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("Renew over a cut connection: want ErrUnavailable, got %v", err)
		}
		_, err = b.Renew(ctx, name, "a", a.Token, time.Minute)
	}
	if err != nil {
		t.Fatalf("Renew after reconnecting: %v", err)
	}
	if err := b.Release(ctx, name, "a", a.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// blackholeHeals is RunFaults' Blackhole.
func blackholeHeals(t *testing.T, b lease.Backend, p *faultproxy.Proxy) {
	ctx, name := context.Background(), Name(t)
	a, err := b.Acquire(ctx, name, "a", time.Minute)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	p.Blackhole(true)
	leasetest.Unavailable(t, b, name, "a", a.Token, 300*time.Millisecond)
	// Drop the requests the partition held (a Release among them, whose
	// outcome the caller was told is unknown), then heal.
	p.Cut()
	p.Blackhole(false)
	// The client may have given up on its connection during the partition
	// (a keep-alive timeout); the first requests after the heal may fail
	// while it reconnects.
	for attempt := 0; ; attempt++ {
		_, err = b.Renew(ctx, name, "a", a.Token, time.Minute)
		if err == nil || !errors.Is(err, lease.ErrUnavailable) || attempt >= reconnectAttempts {
			break
		}
	}
	if err != nil {
		t.Fatalf("Renew after the partition healed: %v", err)
	}
}

// Reconnect is how a backend's holder renews after its server restarts:
// it calls renew (one Renew of the held lease) as often as the backend's
// client needs to reconnect, within bounds of its own, and returns the
// last result.
type Reconnect func(ctx context.Context, renew func(context.Context) (lease.Record, error)) (lease.Record, error)

// RestartKeepsLease checks that the server s keeps a lease and its token
// across a crash: a holder acquires through b (a Backend on s); s is
// killed, and every operation fails with lease.ErrUnavailable, none hangs
// (leasetest.Unavailable); s restarts, and the holder renews (through
// reconnect) with the same token; after its Release, the next Acquire
// gets a greater token.
func RestartKeepsLease(t *testing.T, s *Server, b lease.Backend, reconnect Reconnect) {
	t.Helper()
	ctx, name := context.Background(), Name(t)
	a, err := b.Acquire(ctx, name, "a", time.Minute)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}

	s.Kill()
	leasetest.Unavailable(t, b, name, "a", a.Token, 300*time.Millisecond)

	s.Restart()
	r, err := reconnect(ctx, func(ctx context.Context) (lease.Record, error) {
		return b.Renew(ctx, name, "a", a.Token, time.Minute)
	})
	if !(err == nil && r.Token == a.Token) {
		t.Fatalf("Renew after restart: %+v, %v", r, err)
	}
	if err := b.Release(ctx, name, "a", a.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	c, err := b.Acquire(ctx, name, "c", time.Minute)
	if !(err == nil && c.Token > a.Token) {
		t.Fatalf("Acquire after restart: token %d after %d, %v", c.Token, a.Token, err)
	}
}

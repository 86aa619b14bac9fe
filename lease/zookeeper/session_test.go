package zookeeper

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"coord/internal/leasekit/leasekittest"
	"coord/lease"
	"coord/lease/leasetest"
)

// The session rule, on a real server. A holder whose connection is gone
// cannot tell a session the server still keeps from one it expired: the
// lease is suspended. Renew then fails with ErrUnavailable (never success,
// never a guess of ErrLost) until the client is back, so that an Elector
// steps down at its own deadline; once back, Renew keeps the lease only if
// the session survived and still owns the node.

// Partitioned within its session, a holder's Renew is ErrUnavailable, the
// lease is still held for everyone else, and after the partition heals
// the holder renews it with the same token.
func TestSuspendedIsNotLost(t *testing.T) {
	u := serverURL(t)
	holder, p := leasekittest.Proxied(t, u)
	other := leasekittest.Open(t, u)
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := holder.Acquire(ctx, name, "a", 30*time.Second)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}

	p.Blackhole(true)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = holder.Renew(short, name, "a", a.Token, 30*time.Second)
	cancel()
	if !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "suspended") {
		t.Fatalf("Renew while partitioned: want ErrUnavailable (suspended), got %v", err)
	}
	got, err := other.Get(ctx, name)
	if !(err == nil && got.Holder == "a" && got.Token == a.Token) {
		t.Fatalf("the lease seen from outside the partition: %+v, %v", got, err)
	}

	p.Cut()
	p.Blackhole(false)
	r, err := holder.Renew(ctx, name, "a", a.Token, 30*time.Second)
	if err != nil || r.Token != a.Token {
		t.Fatalf("Renew after the partition healed: %+v, %v", r, err)
	}
	if err := holder.Release(ctx, name, "a", a.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// Partitioned past its session timeout, a holder's session expires on the
// server and another client acquires. When the partition heals, the
// holder's Renew is ErrLost, naming the new holder, and leaves the new
// holder's lease alone.
func TestExpiredWhilePartitionedIsLost(t *testing.T) {
	u := serverURL(t)
	holder, p := leasekittest.Proxied(t, u)
	other := leasekittest.Open(t, u)
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := holder.Acquire(ctx, name, "a", ttl)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}

	p.Blackhole(true)
	leasetest.WaitFor(t, other, name, 30*time.Second, "the partitioned holder's session to expire", lease.Record.Free)
	b, err := other.Acquire(ctx, name, "b", time.Minute)
	if err != nil || b.Token <= a.Token {
		t.Fatalf("Acquire after the expiry: %+v, %v", b, err)
	}

	p.Cut()
	p.Blackhole(false)
	r, err := holder.Renew(ctx, name, "a", a.Token, ttl)
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Renew after the session expired: want ErrLost, got %v", err)
	}
	if r.Holder != "b" || r.Token != b.Token {
		t.Fatalf("Renew's record after the loss: %+v, want b's", r)
	}
	got, err := other.Get(ctx, name)
	if !(err == nil && got.Holder == "b" && got.Token == b.Token) {
		t.Fatalf("the new holder's lease after the old one came back: %+v, %v", got, err)
	}
}

// A holder that is alive, connected (its client pings the server on its
// own) but does not renew loses the lease at its TTL: the Backend closes
// the session at the holder's deadline, and the server deletes the node at
// once.
func TestNotRenewedEndsAtTTL(t *testing.T) {
	u := serverURL(t)
	holder, other := leasekittest.Open(t, u), leasekittest.Open(t, u)
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := holder.Acquire(ctx, name, "a", ttl)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	leasetest.WaitFor(t, other, name, 30*time.Second, "the unrenewed lease to end", lease.Record.Free)
	_, err = holder.Renew(ctx, name, "a", a.Token, ttl)
	if !errors.Is(err, lease.ErrLost) || !strings.Contains(err.Error(), "not renewed within its TTL") {
		t.Fatalf("Renew after the TTL: want ErrLost (not renewed), got %v", err)
	}
}

// A server restarted without its data has forgotten the session and every
// zxid. ZooKeeper refuses a client that has seen a later zxid than the
// server's own (it would go back in time), so the holder's client never
// reconnects: its lease stays suspended, Renew is ErrUnavailable, never
// success, until the holder's deadline passes and Renew is ErrLost. A new
// client sees the lease free; the tokens have started again (the package
// doc says why a wiped server breaks fencing).
func TestServerWipedNeverRenews(t *testing.T) {
	s, u, data := startServer(t)
	holder := leasekittest.Open(t, u)
	ctx, name := context.Background(), leasekittest.Name(t)
	const wipedTTL = 3 * time.Second
	a, err := holder.Acquire(ctx, name, "a", wipedTTL)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}

	s.Kill()
	if err := os.RemoveAll(data); err != nil {
		t.Fatalf("wipe the data directory: %v", err)
	}
	s.Restart()
	long, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		short, cancel := context.WithTimeout(long, 500*time.Millisecond)
		r, err := holder.Renew(short, name, "a", a.Token, wipedTTL)
		cancel()
		if err == nil {
			t.Fatalf("Renew succeeded on a server that lost the session: %+v", r)
		}
		if errors.Is(err, lease.ErrLost) {
			if !strings.Contains(err.Error(), "not renewed within its TTL") {
				t.Fatalf("Renew after the deadline: %v", err)
			}
			break
		}
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("Renew before the deadline: want ErrUnavailable, got %v", err)
		}
		if long.Err() != nil {
			t.Fatalf("the holder's deadline never ended its tenure")
		}
	}
	fresh := leasekittest.Open(t, u)
	got, err := fresh.Get(ctx, name)
	if err != nil || !got.Free() {
		t.Fatalf("the lease on the wiped server: %+v, %v", got, err)
	}
	c, err := fresh.Acquire(ctx, name, "c", wipedTTL)
	if err != nil {
		t.Fatalf("Acquire on the wiped server: %v", err)
	}
	t.Logf("token %d before the wipe, %d after it", a.Token, c.Token)
}

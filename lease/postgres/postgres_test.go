package postgres

import (
	"context"
	"errors"
	"net/url"
	"os"
	"testing"
	"time"

	"coord/internal/leasekit/leasekittest"
	"coord/lease"
	"coord/lease/leasetest"
)

// coordBin is the coord command built by TestMain, for the tests that run
// real `coord elect` processes.
var coordBin string

func TestMain(m *testing.M) { os.Exit(leasekittest.MainWithCoord(m, &coordBin)) }

// withParams returns the test server's URL with extra query parameters.
func withParams(t *testing.T, params string) string {
	raw := leasekittest.ServerURL(t, "COORD_TEST_POSTGRES")
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	extra, err := url.ParseQuery(params)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range extra {
		q[k] = v
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func TestConformance(t *testing.T) {
	for _, mode := range []string{"listen=true", "listen=false&poll=20ms", "advisory=true"} {
		t.Run(mode, func(t *testing.T) {
			url := withParams(t, mode)
			leasetest.Run(t, func(t *testing.T) lease.Backend { return leasekittest.Open(t, url) })
		})
	}
}

// Real `coord elect` processes: the leader killed, terminated, stopped.
func TestProcesses(t *testing.T) {
	for _, mode := range []string{"listen=true", "advisory=true"} {
		t.Run(mode, func(t *testing.T) {
			leasetest.RunProcesses(t, coordBin, withParams(t, mode), leasetest.ProcessOptions{})
		})
	}
}

// With advisory locks, a holder whose process dies is replaced at once,
// long before its TTL: the server releases a dead session's locks.
func TestAdvisoryReleasesDeadHolderAtOnce(t *testing.T) {
	url := withParams(t, "advisory=true")
	holder, other := leasekittest.Open(t, url), leasekittest.Open(t, url)
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := holder.Acquire(ctx, name, "a", time.Hour)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	_, err = other.Acquire(ctx, name, "b", time.Hour)
	if !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("Acquire of a live holder's lease: want ErrHeld, got %v", err)
	}

	// Its session ends, as with a crash.
	if err := holder.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	takesOver(t, other, name, a.Token, "the holder's session ended")
}

// takesOver checks that other acquires name (for an hour, as "b") with a
// token greater than after, long before the TTL of the holder whose session
// ended (why). The server notices an ended session asynchronously, so
// Acquire is retried while it says ErrHeld, for at most 30 s.
func takesOver(t *testing.T, other lease.Backend, name string, after uint64, why string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := other.Acquire(context.Background(), name, "b", time.Hour)
		if err == nil {
			if c.Token <= after {
				t.Fatalf("token %d after %d", c.Token, after)
			}
			return
		}
		if !errors.Is(err, lease.ErrHeld) || !time.Now().Before(deadline) {
			t.Fatalf("Acquire after %s (TTL 1h): %v", why, err)
		}
		time.Sleep(10 * time.Millisecond) // a retry period, not a wait for a state
	}
}

// Cuts and partitions between a Backend and the server.
func TestNetworkFaults(t *testing.T) {
	leasekittest.RunFaults(t, withParams(t, ""))
}

// With advisory locks, a cut connection ends the holder's session, and so
// its lease: its next Renew says ErrLost, and another may take over.
func TestAdvisoryConnectionCutLosesLease(t *testing.T) {
	b, p := leasekittest.Proxied(t, withParams(t, "advisory=true"))
	other := leasekittest.Open(t, withParams(t, "advisory=true"))
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := b.Acquire(ctx, name, "a", time.Hour)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	p.Cut()
	_, err = b.Renew(ctx, name, "a", a.Token, time.Hour)
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Renew after the advisory session was cut: want ErrLost, got %v", err)
	}
	takesOver(t, other, name, a.Token, "the holder's session was cut")
}

func TestBadURLs(t *testing.T) {
	leasekittest.OpenFails(t, lease.ErrInvalid,
		"postgres://127.0.0.1:1/db?table=Bad-Name",
		"postgres://127.0.0.1:1/db?advisory=maybe",
		"postgres://127.0.0.1:1/db?poll=soon",
		"postgres://127.0.0.1:1/db?sslmode=sometimes")
	leasekittest.OpenFails(t, lease.ErrUnavailable, "postgres://127.0.0.1:1/db")
}

// A holder with an advisory lock that dies is seen as gone by every
// client, with advisory locks or not: Get reports the lease free, and a
// plain Acquire takes it over, long before its TTL.
func TestDeadAdvisoryHolderIsFreeForEveryone(t *testing.T) {
	holder := leasekittest.Open(t, withParams(t, "advisory=true"))
	plain := leasekittest.Open(t, withParams(t, ""))
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := holder.Acquire(ctx, name, "a", time.Hour)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	got, err := plain.Get(ctx, name)
	if err != nil || got.Holder != "a" {
		t.Fatalf("Get while the advisory holder lives: %+v, %v", got, err)
	}
	_, err = plain.Acquire(ctx, name, "b", time.Hour)
	if !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("plain Acquire while the advisory holder lives: want ErrHeld, got %v", err)
	}

	// Its session ends, as with a crash.
	if err := holder.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for { // the server notices the closed session asynchronously
		got, err = plain.Get(ctx, name)
		if err == nil && got.Free() {
			break
		}
		if err != nil || !time.Now().Before(deadline) {
			t.Fatalf("Get after the holder's session ended (TTL 1h): %+v, %v", got, err)
		}
		time.Sleep(10 * time.Millisecond) // a retry period, not a wait for a state
	}
	c, err := plain.Acquire(ctx, name, "b", time.Hour)
	if err != nil || c.Token <= a.Token {
		t.Fatalf("plain Acquire after the holder died: %+v, %v", c, err)
	}
}

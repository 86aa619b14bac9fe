package postgres

import (
	"context"
	"errors"
	"net/url"
	"os"
	"testing"
	"time"

	"coord/internal/assert"
	"coord/internal/faultproxy"
	"coord/internal/leasekit/leasekittest"
	"coord/lease"
	"coord/lease/leasetest"
)

// coordBin is the coord command built by TestMain, for the tests that run
// real `coord elect` processes.
var coordBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "coord-postgres-test")
	if err != nil {
		panic(err)
	}
	if coordBin, err = leasetest.BuildCoord(dir); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func open(t *testing.T, url string) lease.Backend {
	t.Helper()
	b, err := lease.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

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
			leasetest.Run(t, func(t *testing.T) lease.Backend { return open(t, url) })
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
	holder, other := open(t, url), open(t, url)
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := holder.Acquire(ctx, name, "a", time.Hour)
	assert.That(err == nil, "Acquire: %v", err)
	_, err = other.Acquire(ctx, name, "b", time.Hour)
	assert.That(errors.Is(err, lease.ErrHeld), "Acquire of a live holder's lease: want ErrHeld, got %v", err)

	assert.That(holder.Close() == nil, "Close failed") // its session ends, as with a crash
	// The server notices the closed session asynchronously: retry briefly.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := other.Acquire(ctx, name, "b", time.Hour)
		if err == nil {
			assert.That(c.Token > a.Token, "token %d after %d", c.Token, a.Token)
			break
		}
		assert.That(errors.Is(err, lease.ErrHeld) && time.Now().Before(deadline), "Acquire after the holder's session ended (TTL 1h): %v", err)
		time.Sleep(10 * time.Millisecond) // a retry period, not a wait for a state
	}
}

// proxied opens a Backend that reaches the test server through a fault
// proxy.
func proxied(t *testing.T, params string) (lease.Backend, *faultproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(withParams(t, params))
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	return open(t, u.String()), p
}

func TestWatchAcrossCut(t *testing.T) {
	watcher, p := proxied(t, "")
	actor := open(t, withParams(t, ""))
	leasetest.WatchAcrossCut(t, watcher, actor, p.Cut)
}

// A cut connection fails the operation in flight or the next one with
// ErrUnavailable; the one after reconnects.
func TestConnectionCut(t *testing.T) {
	b, p := proxied(t, "")
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := b.Acquire(ctx, name, "a", time.Minute)
	assert.That(err == nil, "Acquire: %v", err)
	p.Cut()
	_, err = b.Renew(ctx, name, "a", a.Token, time.Minute)
	if err != nil {
		assert.That(errors.Is(err, lease.ErrUnavailable), "Renew over a cut connection: want ErrUnavailable, got %v", err)
		_, err = b.Renew(ctx, name, "a", a.Token, time.Minute)
	}
	assert.That(err == nil, "Renew after reconnecting: %v", err)
	assert.That(b.Release(ctx, name, "a", a.Token) == nil, "Release failed")
}

// With advisory locks, a cut connection ends the holder's session, and so
// its lease: its next Renew says ErrLost, and another may take over.
func TestAdvisoryConnectionCutLosesLease(t *testing.T) {
	b, p := proxied(t, "advisory=true")
	other := open(t, withParams(t, "advisory=true"))
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := b.Acquire(ctx, name, "a", time.Hour)
	assert.That(err == nil, "Acquire: %v", err)
	p.Cut()
	_, err = b.Renew(ctx, name, "a", a.Token, time.Hour)
	assert.That(errors.Is(err, lease.ErrLost), "Renew after the advisory session was cut: want ErrLost, got %v", err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := other.Acquire(ctx, name, "b", time.Hour)
		if err == nil {
			assert.That(c.Token > a.Token, "token %d after %d", c.Token, a.Token)
			break
		}
		assert.That(errors.Is(err, lease.ErrHeld) && time.Now().Before(deadline), "Acquire after the holder's session was cut (TTL 1h): %v", err)
		time.Sleep(10 * time.Millisecond) // a retry period, not a wait for a state
	}
}

func TestBlackholeIsUnavailable(t *testing.T) {
	b, p := proxied(t, "")
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := b.Acquire(ctx, name, "a", time.Minute)
	assert.That(err == nil, "Acquire: %v", err)
	p.Blackhole(true)
	leasetest.Unavailable(t, b, name, "a", a.Token, 300*time.Millisecond)
	// Drop the requests the partition held (a Release among them, whose
	// outcome the caller was told is unknown), then heal.
	p.Cut()
	p.Blackhole(false)
	for attempt := 0; ; attempt++ { // the first requests may fail while the client reconnects
		_, err = b.Renew(ctx, name, "a", a.Token, time.Minute)
		if err == nil || !errors.Is(err, lease.ErrUnavailable) || attempt >= 20 {
			break
		}
	}
	assert.That(err == nil, "Renew after the partition healed: %v", err)
}

func TestElectorStepsDownWhenBlackholed(t *testing.T) {
	leader, p := proxied(t, "")
	other := open(t, withParams(t, ""))
	leasetest.StepsDownWhenUnreachable(t, leader, other, func() { p.Blackhole(true) }, 3*time.Second)
}

func TestBadURLs(t *testing.T) {
	for _, raw := range []string{
		"postgres://127.0.0.1:1/db?table=Bad-Name",
		"postgres://127.0.0.1:1/db?advisory=maybe",
		"postgres://127.0.0.1:1/db?poll=soon",
		"postgres://127.0.0.1:1/db?sslmode=sometimes",
	} {
		_, err := lease.Open(context.Background(), raw)
		assert.That(errors.Is(err, lease.ErrInvalid), "%s: want ErrInvalid, got %v", raw, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := lease.Open(ctx, "postgres://127.0.0.1:1/db")
	assert.That(errors.Is(err, lease.ErrUnavailable), "unreachable server: want ErrUnavailable, got %v", err)
}

// A holder with an advisory lock that dies is seen as gone by every
// client, with advisory locks or not: Get reports the lease free, and a
// plain Acquire takes it over, long before its TTL.
func TestDeadAdvisoryHolderIsFreeForEveryone(t *testing.T) {
	holder := open(t, withParams(t, "advisory=true"))
	plain := open(t, withParams(t, ""))
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := holder.Acquire(ctx, name, "a", time.Hour)
	assert.That(err == nil, "Acquire: %v", err)
	got, err := plain.Get(ctx, name)
	assert.That(err == nil && got.Holder == "a", "Get while the advisory holder lives: %+v, %v", got, err)
	_, err = plain.Acquire(ctx, name, "b", time.Hour)
	assert.That(errors.Is(err, lease.ErrHeld), "plain Acquire while the advisory holder lives: want ErrHeld, got %v", err)

	assert.That(holder.Close() == nil, "Close failed") // its session ends, as with a crash
	deadline := time.Now().Add(30 * time.Second)
	for { // the server notices the closed session asynchronously
		got, err = plain.Get(ctx, name)
		if err == nil && got.Free() {
			break
		}
		assert.That(err == nil && time.Now().Before(deadline), "Get after the holder's session ended (TTL 1h): %+v, %v", got, err)
		time.Sleep(10 * time.Millisecond) // a retry period, not a wait for a state
	}
	c, err := plain.Acquire(ctx, name, "b", time.Hour)
	assert.That(err == nil && c.Token > a.Token, "plain Acquire after the holder died: %+v, %v", c, err)
}

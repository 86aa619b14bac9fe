package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"testing"
	"time"

	"coord/internal/assert"
	"coord/internal/faultproxy"
	"coord/internal/leasekit/leasekittest"
	"coord/lease"
	"coord/lease/leasetest"
)

// ttl is the shortest TTL etcd grants the test servers, which run with a
// 500 ms election timeout (etcd's minimum TTL is 1.5 election timeouts,
// rounded up to whole seconds).
const ttl = time.Second

// coordBin is the coord command built by TestMain, for the tests that run
// real `coord elect` processes.
var coordBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "coord-etcd-test")
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

func TestConformance(t *testing.T) {
	url := leasekittest.ServerURL(t, "COORD_TEST_ETCD")
	leasetest.RunWithOptions(t, func(t *testing.T) lease.Backend { return open(t, url) }, leasetest.Options{TTL: ttl, Duration: 5 * time.Second})
}

// Real `coord elect` processes: the leader killed, terminated, stopped.
func TestProcesses(t *testing.T) {
	url := leasekittest.ServerURL(t, "COORD_TEST_ETCD")
	leasetest.RunProcesses(t, coordBin, url, leasetest.ProcessOptions{TTL: ttl})
}

// A TTL that is not a whole number of seconds is granted rounded up, and
// the Record says so; a Renew asking for more moves the key to a longer
// etcd lease, keeping its token.
func TestWholeSecondTTLs(t *testing.T) {
	b := open(t, leasekittest.ServerURL(t, "COORD_TEST_ETCD"))
	ctx, name := context.Background(), leasekittest.Name(t)
	sent := time.Now()
	a, err := b.Acquire(ctx, name, "a", 1500*time.Millisecond)
	assert.That(err == nil, "Acquire: %v", err)
	assert.That(!a.Expiry.Before(sent.Add(2*time.Second)), "Expiry %v, want at least send + 2s", a.Expiry.Sub(sent))
	sent = time.Now()
	r, err := b.Renew(ctx, name, "a", a.Token, time.Minute)
	assert.That(err == nil && r.Token == a.Token, "Renew for longer: %+v, %v", r, err)
	assert.That(!r.Expiry.Before(sent.Add(time.Minute)), "Expiry %v after renewing for a minute", r.Expiry.Sub(sent))
	got, err := b.Get(ctx, name)
	assert.That(err == nil && got.Token == a.Token && got.Expiry.After(time.Now().Add(30*time.Second)), "Get after rebinding: %+v, %v", got, err)
	assert.That(b.Release(ctx, name, "a", a.Token) == nil, "Release failed")
}

// proxied opens a Backend that reaches the test server through a fault
// proxy.
func proxied(t *testing.T) (lease.Backend, *faultproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(leasekittest.ServerURL(t, "COORD_TEST_ETCD"))
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
	watcher, p := proxied(t)
	actor := open(t, leasekittest.ServerURL(t, "COORD_TEST_ETCD"))
	leasetest.WatchAcrossCut(t, watcher, actor, p.Cut)
}

func TestConnectionCut(t *testing.T) {
	b, p := proxied(t)
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := b.Acquire(ctx, name, "a", time.Minute)
	assert.That(err == nil, "Acquire: %v", err)
	p.Cut()
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = b.Renew(short, name, "a", a.Token, time.Minute)
	if err != nil {
		assert.That(errors.Is(err, lease.ErrUnavailable), "Renew over a cut connection: want ErrUnavailable, got %v", err)
		_, err = b.Renew(ctx, name, "a", a.Token, time.Minute)
	}
	assert.That(err == nil, "Renew after reconnecting: %v", err)
	assert.That(b.Release(ctx, name, "a", a.Token) == nil, "Release failed")
}

func TestBlackholeIsUnavailable(t *testing.T) {
	b, p := proxied(t)
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := b.Acquire(ctx, name, "a", time.Minute)
	assert.That(err == nil, "Acquire: %v", err)
	p.Blackhole(true)
	leasetest.Unavailable(t, b, name, "a", a.Token, 300*time.Millisecond)
	// Drop the requests the partition held (a Release among them, whose
	// outcome the caller was told is unknown), then heal.
	p.Cut()
	p.Blackhole(false)
	// The client may have given up on its connection during the partition
	// (keep-alive timeout); the first requests after the heal may fail
	// while it reconnects.
	for attempt := 0; ; attempt++ {
		_, err = b.Renew(ctx, name, "a", a.Token, time.Minute)
		if err == nil || !errors.Is(err, lease.ErrUnavailable) || attempt >= 20 {
			break
		}
	}
	assert.That(err == nil, "Renew after the partition healed: %v", err)
}

func TestElectorStepsDownWhenBlackholed(t *testing.T) {
	leader, p := proxied(t)
	other := open(t, leasekittest.ServerURL(t, "COORD_TEST_ETCD"))
	leasetest.StepsDownWhenUnreachable(t, leader, other, func() { p.Blackhole(true) }, 3*time.Second)
}

// server is a one-member etcd cluster of the test's own, which it can kill
// and restart on the same ports and data directory.
type server struct {
	t            *testing.T
	dir          string
	client, peer int
	cmd          *exec.Cmd
}

func startServer(t *testing.T) *server {
	t.Helper()
	if _, err := exec.LookPath("etcd"); err != nil {
		leasekittest.ServerURL(t, "COORD_TEST_ETCD") // skip or fail as for the shared server
		t.Fatalf("etcd is not installed, though COORD_TEST_ETCD is set: %v", err)
	}
	s := &server{t: t, dir: t.TempDir(), client: freePort(t), peer: freePort(t)}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *server) url() string { return fmt.Sprintf("etcd://127.0.0.1:%d", s.client) }

func (s *server) start() {
	s.t.Helper()
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", s.client), fmt.Sprintf("http://127.0.0.1:%d", s.peer)
	s.cmd = exec.Command("etcd", "--name", "restart", "--data-dir", s.dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "restart="+peer, "--log-level", "error",
		"--heartbeat-interval", "50", "--election-timeout", "500")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		b, err := lease.Open(ctx, s.url())
		cancel()
		if err == nil {
			b.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("etcd did not answer on port %d: %v", s.client, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a server's start: nothing to wait on
	}
}

func (s *server) kill() {
	if s.cmd != nil && s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// A member killed and restarted keeps the key, its lease and the revision:
// while it is down, operations fail with ErrUnavailable; afterwards the
// holder renews, and the next token is greater.
func TestServerRestart(t *testing.T) {
	s := startServer(t)
	b := open(t, s.url())
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := b.Acquire(ctx, name, "a", time.Minute)
	assert.That(err == nil, "Acquire: %v", err)

	s.kill()
	leasetest.Unavailable(t, b, name, "a", a.Token, 300*time.Millisecond)

	s.start()
	long, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := b.Renew(long, name, "a", a.Token, time.Minute)
	assert.That(err == nil && r.Token == a.Token, "Renew after restart: %+v, %v", r, err)
	assert.That(b.Release(ctx, name, "a", a.Token) == nil, "Release failed")
	c, err := b.Acquire(ctx, name, "c", time.Minute)
	assert.That(err == nil && c.Token > a.Token, "Acquire after restart: token %d after %d, %v", c.Token, a.Token, err)
}

func TestBadURLs(t *testing.T) {
	for _, raw := range []string{
		"etcd:///nohost",
		"etcd://127.0.0.1:1/some/path",
		"etcd://127.0.0.1:1?color=blue",
		"etcd://127.0.0.1:1?dial_timeout=soon",
	} {
		_, err := lease.Open(context.Background(), raw)
		assert.That(errors.Is(err, lease.ErrInvalid), "%s: want ErrInvalid, got %v", raw, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := lease.Open(ctx, "etcd://127.0.0.1:1")
	assert.That(errors.Is(err, lease.ErrUnavailable), "unreachable cluster: want ErrUnavailable, got %v", err)
}

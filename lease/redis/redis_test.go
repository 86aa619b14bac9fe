package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
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
	dir, err := os.MkdirTemp("", "coord-redis-test")
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
	url := leasekittest.ServerURL(t, "COORD_TEST_REDIS")
	leasetest.Run(t, func(t *testing.T) lease.Backend { return open(t, url) })
}

// Real `coord elect` processes: the leader killed, terminated, stopped.
func TestProcesses(t *testing.T) {
	url := leasekittest.ServerURL(t, "COORD_TEST_REDIS")
	leasetest.RunProcesses(t, coordBin, url, leasetest.ProcessOptions{})
}

// proxied opens a Backend that reaches the test server through a fault
// proxy.
func proxied(t *testing.T) (lease.Backend, *faultproxy.Proxy) {
	t.Helper()
	raw := leasekittest.ServerURL(t, "COORD_TEST_REDIS")
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
	return open(t, u.String()), p
}

// A cut connection fails the operation in flight or the next one with
// ErrUnavailable, never with a wrong answer, and the one after reconnects.
func TestWatchAcrossCut(t *testing.T) {
	watcher, p := proxied(t)
	actor := open(t, leasekittest.ServerURL(t, "COORD_TEST_REDIS"))
	leasetest.WatchAcrossCut(t, watcher, actor, p.Cut)
}

func TestConnectionCut(t *testing.T) {
	b, p := proxied(t)
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

// A server that stops answering (a partition) makes every operation return
// ErrUnavailable once its context is done; none hangs.
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
	for attempt := 0; ; attempt++ { // the first requests may fail while the client reconnects
		_, err = b.Renew(ctx, name, "a", a.Token, time.Minute)
		if err == nil || !errors.Is(err, lease.ErrUnavailable) || attempt >= 20 {
			break
		}
	}
	assert.That(err == nil, "Renew after the partition healed: %v", err)
}

// server is a redis-server of the test's own, which it can kill and
// restart on the same port and directory.
type server struct {
	t    *testing.T
	dir  string
	port int
	cmd  *exec.Cmd
}

func startServer(t *testing.T) *server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		leasekittest.ServerURL(t, "COORD_TEST_REDIS") // skip or fail as for the shared server
		t.Fatalf("redis-server is not installed, though COORD_TEST_REDIS is set: %v", err)
	}
	s := &server{t: t, dir: t.TempDir(), port: freePort(t)}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *server) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

// start runs the server with every write in the append-only file, fsynced:
// the only configuration in which a restart keeps the token counter.
func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always")
	s.cmd.Stdout, s.cmd.Stderr = nil, nil
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.port))
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server did not listen on port %d: %v", s.port, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a port: nothing to wait on
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

// A server killed and restarted (with appendfsync always) keeps the lease
// and its counter: while it is down, operations fail with ErrUnavailable;
// afterwards the holder renews, and the next token is greater.
func TestServerRestart(t *testing.T) {
	s := startServer(t)
	b := open(t, s.url())
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := b.Acquire(ctx, name, "a", time.Minute)
	assert.That(err == nil, "Acquire: %v", err)

	s.kill()
	leasetest.Unavailable(t, b, name, "a", a.Token, 300*time.Millisecond)

	s.start()
	// The server accepts connections before it has loaded its append-only
	// file, and answers LOADING (ErrUnavailable) until then.
	var r lease.Record
	for deadline := time.Now().Add(30 * time.Second); ; {
		r, err = b.Renew(ctx, name, "a", a.Token, time.Minute)
		if err == nil || !errors.Is(err, lease.ErrUnavailable) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // a retry period, not a wait for a state
	}
	assert.That(err == nil && r.Token == a.Token, "Renew after restart: %+v, %v", r, err)
	assert.That(b.Release(ctx, name, "a", a.Token) == nil, "Release failed")
	c, err := b.Acquire(ctx, name, "c", time.Minute)
	assert.That(err == nil && c.Token > a.Token, "Acquire after restart: token %d after %d, %v", c.Token, a.Token, err)
}

func TestBadURLs(t *testing.T) {
	for _, raw := range []string{
		"redis://127.0.0.1:1/0?keyspace=maybe",
		"redis://127.0.0.1:1/0?color=blue",
		"redis://127.0.0.1:1/notanumber",
	} {
		_, err := lease.Open(context.Background(), raw)
		assert.That(errors.Is(err, lease.ErrInvalid), "%s: want ErrInvalid, got %v", raw, err)
	}
	// Nobody listens on port 1: opening says the store is unavailable, at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := lease.Open(ctx, "redis://127.0.0.1:1/0")
	assert.That(errors.Is(err, lease.ErrUnavailable), "unreachable server: want ErrUnavailable, got %v", err)
}

// An elector whose connection is blackholed steps down before the store
// lets anyone else in.
func TestElectorStepsDownWhenBlackholed(t *testing.T) {
	leader, p := proxied(t)
	other := open(t, leasekittest.ServerURL(t, "COORD_TEST_REDIS"))
	leasetest.StepsDownWhenUnreachable(t, leader, other, func() { p.Blackhole(true) }, 3*time.Second)
}

package etcd

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

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

func TestMain(m *testing.M) { os.Exit(leasekittest.MainWithCoord(m, &coordBin)) }

func TestConformance(t *testing.T) {
	url := leasekittest.ServerURL(t, "COORD_TEST_ETCD")
	leasetest.RunWithOptions(t, func(t *testing.T) lease.Backend { return leasekittest.Open(t, url) }, leasetest.Options{TTL: ttl, Duration: 5 * time.Second})
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
	b := leasekittest.Open(t, leasekittest.ServerURL(t, "COORD_TEST_ETCD"))
	ctx, name := context.Background(), leasekittest.Name(t)
	sent := time.Now()
	a, err := b.Acquire(ctx, name, "a", 1500*time.Millisecond)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if a.Expiry.Before(sent.Add(2 * time.Second)) {
		t.Fatalf("Expiry %v, want at least send + 2s", a.Expiry.Sub(sent))
	}
	sent = time.Now()
	r, err := b.Renew(ctx, name, "a", a.Token, time.Minute)
	if err != nil || r.Token != a.Token {
		t.Fatalf("Renew for longer: %+v, %v", r, err)
	}
	if r.Expiry.Before(sent.Add(time.Minute)) {
		t.Fatalf("Expiry %v after renewing for a minute", r.Expiry.Sub(sent))
	}
	got, err := b.Get(ctx, name)
	if !(err == nil && got.Token == a.Token && got.Expiry.After(time.Now().Add(30*time.Second))) {
		t.Fatalf("Get after rebinding: %+v, %v", got, err)
	}
	if err := b.Release(ctx, name, "a", a.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// Cuts and partitions between a Backend and the server.
func TestNetworkFaults(t *testing.T) {
	leasekittest.RunFaults(t, leasekittest.ServerURL(t, "COORD_TEST_ETCD"))
}

// startServer starts a one-member etcd cluster of the test's own, which it
// can kill and restart on the same ports and data directory, and returns
// its URL. It is up once a client can open a Backend on it: a member
// accepts connections before it has elected itself.
func startServer(t *testing.T) (*leasekittest.Server, string) {
	t.Helper()
	bin := leasekittest.LookPath(t, "COORD_TEST_ETCD", "etcd")
	port, peerPort := leasekittest.FreePort(t), leasekittest.FreePort(t)
	url := fmt.Sprintf("etcd://127.0.0.1:%d", port)
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", port), fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	s := leasekittest.StartServer(t, leasekittest.ServerOptions{Port: port, Ready: leasekittest.Opens(url)}, bin,
		"--name", "restart", "--data-dir", t.TempDir(),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "restart="+peer, "--log-level", "error",
		"--heartbeat-interval", "50", "--election-timeout", "500")
	return s, url
}

// A member killed and restarted keeps the key, its lease and the revision:
// while it is down, operations fail with ErrUnavailable; afterwards the
// holder renews, and the next token is greater.
func TestServerRestart(t *testing.T) {
	s, url := startServer(t)
	leasekittest.RestartKeepsLease(t, s, leasekittest.Open(t, url), func(ctx context.Context, renew func(context.Context) (lease.Record, error)) (lease.Record, error) {
		// The client reconnects within one Renew, given the time.
		long, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return renew(long)
	})
}

func TestBadURLs(t *testing.T) {
	leasekittest.OpenFails(t, lease.ErrInvalid,
		"etcd:///nohost",
		"etcd://127.0.0.1:1/some/path",
		"etcd://127.0.0.1:1?color=blue",
		"etcd://127.0.0.1:1?dial_timeout=soon")
	leasekittest.OpenFails(t, lease.ErrUnavailable, "etcd://127.0.0.1:1")
}

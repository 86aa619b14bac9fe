package redis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
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

func TestConformance(t *testing.T) {
	url := leasekittest.ServerURL(t, "COORD_TEST_REDIS")
	leasetest.Run(t, func(t *testing.T) lease.Backend { return leasekittest.Open(t, url) })
}

// Real `coord elect` processes: the leader killed, terminated, stopped.
func TestProcesses(t *testing.T) {
	url := leasekittest.ServerURL(t, "COORD_TEST_REDIS")
	leasetest.RunProcesses(t, coordBin, url, leasetest.ProcessOptions{})
}

// Cuts and partitions between a Backend and the server.
func TestNetworkFaults(t *testing.T) {
	leasekittest.RunFaults(t, leasekittest.ServerURL(t, "COORD_TEST_REDIS"))
}

// startServer starts a redis-server of the test's own, which it can kill
// and restart on the same port and directory, and returns its URL. Every
// write goes to the append-only file, fsynced: the only configuration in
// which a restart keeps the token counter.
func startServer(t *testing.T) (*leasekittest.Server, string) {
	t.Helper()
	bin := leasekittest.LookPath(t, "COORD_TEST_REDIS", "redis-server")
	port := leasekittest.FreePort(t)
	s := leasekittest.StartServer(t, leasekittest.ServerOptions{Port: port}, bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", t.TempDir(),
		"--save", "", "--appendonly", "yes", "--appendfsync", "always")
	return s, fmt.Sprintf("redis://127.0.0.1:%d/0", port)
}

// A server killed and restarted (with appendfsync always) keeps the lease
// and its counter: while it is down, operations fail with ErrUnavailable;
// afterwards the holder renews, and the next token is greater.
func TestServerRestart(t *testing.T) {
	s, url := startServer(t)
	leasekittest.RestartKeepsLease(t, s, leasekittest.Open(t, url), func(ctx context.Context, renew func(context.Context) (lease.Record, error)) (lease.Record, error) {
		// The server accepts connections before it has loaded its
		// append-only file, and answers LOADING (ErrUnavailable) until then.
		for deadline := time.Now().Add(30 * time.Second); ; {
			r, err := renew(ctx)
			if err == nil || !errors.Is(err, lease.ErrUnavailable) || time.Now().After(deadline) {
				return r, err
			}
			time.Sleep(20 * time.Millisecond) // a retry period, not a wait for a state
		}
	})
}

func TestBadURLs(t *testing.T) {
	leasekittest.OpenFails(t, lease.ErrInvalid,
		"redis://127.0.0.1:1/0?keyspace=maybe",
		"redis://127.0.0.1:1/0?color=blue",
		"redis://127.0.0.1:1/notanumber")
	// Nobody listens on port 1: opening says the store is unavailable.
	leasekittest.OpenFails(t, lease.ErrUnavailable, "redis://127.0.0.1:1/0")
}

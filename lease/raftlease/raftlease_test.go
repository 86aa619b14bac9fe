package raftlease

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
	"coord/server/localcluster"
)

// coordBin is the coord command built by TestMain, for the tests that run
// real `coord elect` processes against the cluster.
var coordBin string

func TestMain(m *testing.M) {
	localcluster.ServeIfChild()
	os.Exit(leasekittest.MainWithCoord(m, &coordBin))
}

// Real `coord elect --store raft://...` processes: the leader killed,
// terminated, stopped.
func TestProcesses(t *testing.T) {
	c := startCluster(t)
	leasetest.RunProcesses(t, coordBin, storeURL(c), leasetest.ProcessOptions{})
}

// startCluster starts a 3-node cluster of real server processes (this test
// binary, serving as `coord server`).
func startCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{Nodes: 3, Dir: t.TempDir(), Binary: os.Args[0],
		SelfServe: true, Args: []string{"--tick", "50ms"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

func storeURL(c *localcluster.Cluster) string {
	return "raft://" + strings.Join(c.Endpoints(), ",")
}

func TestConformance(t *testing.T) {
	c := startCluster(t)
	u := storeURL(c)
	leasetest.RunWithOptions(t, func(t *testing.T) lease.Backend { return leasekittest.Open(t, u) },
		leasetest.Options{TTL: 400 * time.Millisecond})
}

// TestLeaderCrashExtendsLeases kills the cluster's leader while a lease is
// held: the lease survives the change of leader (it is extended, never
// shortened), and its holder can still renew it with its token.
func TestLeaderCrashExtendsLeases(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := leasekittest.Open(t, storeURL(c))
	rec, err := b.Acquire(ctx, "L", "a", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	leader, _ := c.WaitLeader(ctx)
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, "L", "b", time.Second); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("acquire by another holder after the leader change: %v, want ErrHeld", err)
	}
	if _, err := b.Renew(ctx, "L", "a", rec.Token, 3*time.Second); err != nil {
		t.Fatalf("renew after the leader change: %v", err)
	}
}

func TestBadURLs(t *testing.T) {
	leasekittest.OpenFails(t, lease.ErrInvalid, "raft://", "raft://a:1?timeout=soon", "raft://a:1?timeout=-1s")
}

func TestUnreachableClusterIsUnavailable(t *testing.T) {
	b, err := Open(Options{Endpoints: []string{"127.0.0.1:1"}, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Acquire(context.Background(), "L", "a", time.Second); !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("acquire: %v, want ErrUnavailable", err)
	}
}

package raftlease

import (
	"context"
	"errors"
	"net/url"
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
func startCluster(t testing.TB) *localcluster.Cluster {
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

// storeURL names the cluster, its CA and its admin token in a raft://
// URL, as a user of a secure cluster writes it.
func storeURL(c *localcluster.Cluster) string {
	sec := c.Security()
	return "raft://" + strings.Join(c.Endpoints(), ",") + "?" + url.Values{"cacert": {sec.CA}, "token_file": {sec.TokenFile}}.Encode()
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
	noEnv := func(string) string { return "" }
	for _, raw := range []string{
		"raft://", "raft://a:1?timeout=soon", "raft://a:1?timeout=-1s", "raft://a:1?tls=maybe",
		"raft://a:1?cacert=/nonexistent/ca.crt", "raft://a:1?token_file=/nonexistent/token",
		"raft://a:1?cert=/nonexistent/c.crt", "raft://a:1?token=secret", "raft://a:1?session=maybe",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := openURL(u, noEnv); !errors.Is(err, lease.ErrInvalid) {
			if b != nil {
				b.Close()
			}
			t.Errorf("%s: %v, want ErrInvalid", raw, err)
		}
	}
}

// TestSecureClusterFromTheEnvironment reaches a secure cluster with
// raft:// and the variables coord cluster env prints; without the token,
// or with the wrong CA, it cannot.
func TestSecureClusterFromTheEnvironment(t *testing.T) {
	c := startCluster(t)
	sec := c.Security()
	token, err := os.ReadFile(sec.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	var https []string
	for _, ep := range c.Endpoints() {
		https = append(https, "https://"+ep)
	}
	env := map[string]string{EnvEndpoints: strings.Join(https, ","), EnvCACert: sec.CA, EnvToken: strings.TrimSpace(string(token))}
	open := func(raw string, env map[string]string) (*Backend, error) {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return openURL(u, func(k string) string { return env[k] })
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := open("raft://", env)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Acquire(ctx, "env", "a", time.Second); err != nil {
		t.Fatalf("acquire with the environment's settings: %v", err)
	}
	noToken := map[string]string{EnvEndpoints: env[EnvEndpoints], EnvCACert: sec.CA}
	b2, err := open("raft://", noToken)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if _, err := b2.Get(ctx, "env"); !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), "unauthenticated") {
		t.Fatalf("without a token: %v, want a refusal", err)
	}
	plain, err := open("raft://"+strings.Join(c.Endpoints(), ",")+"?tls=false&timeout=1s", map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Get(ctx, "env"); !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("plain HTTP to a TLS cluster: %v, want unavailable", err)
	}
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

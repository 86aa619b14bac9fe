package raftlease

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"coord/internal/faultproxy"
	"coord/lease"
	"coord/lease/eventlog"
	"coord/lease/leasetest"
	"coord/server/localcluster"
)

// sessionTTL is long on purpose: a next holder within the tests' deadlines
// (well under it) can only come from the session's end, never the TTL.
const (
	sessionTTL      = 60 * time.Second
	sessionDeadline = 30 * time.Second
)

// sessionURL is storeURL with sessions on, through endpoints (the
// cluster's own, or proxies in front of them).
func sessionURL(c *localcluster.Cluster, endpoints []string) string {
	sec := c.Security()
	return "raft://" + strings.Join(endpoints, ",") + "?" +
		url.Values{"cacert": {sec.CA}, "token_file": {sec.TokenFile}, "session": {"true"}}.Encode()
}

// sessionReleases sums coord_lease_session_releases_total over the nodes.
func sessionReleases(t *testing.T, c *localcluster.Cluster) float64 {
	t.Helper()
	cfg := c.ClientConfig()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg.TLS}, Timeout: 10 * time.Second}
	var sum float64
	for _, ep := range c.Endpoints() {
		req, _ := http.NewRequest("GET", "https://"+ep+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+cfg.Token)
		resp, err := hc.Do(req)
		if err != nil {
			continue // a node killed by the test
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "coord_lease_session_releases_total "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				sum += f
			}
		}
		resp.Body.Close()
	}
	return sum
}

// A `coord elect` holder with a session, killed with SIGKILL: the kernel
// closes its stream, the leader frees the lease after its grace, and the
// next holder is elected long before the 60 s TTL.
func TestSessionHolderKilled(t *testing.T) {
	c := startCluster(t)
	g := leasetest.StartGroup(t, coordBin, sessionURL(c, c.Endpoints()), leasetest.NewName(), 2, "--ttl", sessionTTL.String())
	leader := g.WaitEvent(t, sessionDeadline, "a first leader", func(e lease.Event) bool { return e.Event == lease.EventElected })
	before := sessionReleases(t, c)
	g.Signal(t, leader.ID, syscall.SIGKILL)
	next := g.WaitEvent(t, sessionDeadline, "a new leader after SIGKILL, before the TTL", func(e lease.Event) bool {
		return e.Event == lease.EventElected && e.ID != leader.ID
	})
	if next.Token <= leader.Token {
		t.Errorf("next token %d, want > %d", next.Token, leader.Token)
	}
	if after := sessionReleases(t, c); after < before+1 {
		t.Errorf("session releases %v -> %v: the lease was not freed by the session's end", before, after)
	}
	g.CheckOneLeader(t)
}

// A holder whose stream is cut by a fault (its process lives) steps down
// before the leader frees the lease: its lost event comes before the next
// holder's election on the machine's monotonic clock.
func TestSessionCutHolderStepsDownFirst(t *testing.T) {
	c := startCluster(t)
	var proxied []string
	var proxies []*faultproxy.Proxy
	for _, ep := range c.Endpoints() {
		p, err := faultproxy.New(ep)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		proxies = append(proxies, p)
		proxied = append(proxied, p.Addr())
	}
	name := leasetest.NewName()
	ttl := []string{"--ttl", sessionTTL.String()}
	holder := leasetest.StartGroup(t, coordBin, sessionURL(c, proxied), name, 0, ttl...)
	holder.Add(t, "cut")
	first := holder.WaitEvent(t, sessionDeadline, "the proxied holder's election", func(e lease.Event) bool { return e.Event == lease.EventElected })
	other := leasetest.StartGroup(t, coordBin, sessionURL(c, c.Endpoints()), name, 0, ttl...)
	other.Add(t, "next")
	other.WaitEvent(t, sessionDeadline, "the other participant to see the holder", func(e lease.Event) bool { return e.Event == lease.EventLeader })
	for _, p := range proxies {
		p.Reject(true)
		p.Cut()
	}
	lost := holder.WaitEvent(t, sessionDeadline, "the cut holder to step down", func(e lease.Event) bool {
		return e.Event == lease.EventLost && e.Token == first.Token
	})
	next := other.WaitEvent(t, sessionDeadline, "the next holder, before the TTL", func(e lease.Event) bool { return e.Event == lease.EventElected })
	if next.Token <= first.Token {
		t.Errorf("next token %d, want > %d", next.Token, first.Token)
	}
	if lost.MonoNS >= next.MonoNS {
		t.Errorf("the cut holder stepped down at %d ns, not before the next holder's election at %d ns", lost.MonoNS, next.MonoNS)
	}
	for _, e := range holder.Events() {
		if e.Event == lease.EventRenewed && e.MonoNS > lost.MonoNS {
			t.Errorf("the cut holder renewed after it stepped down: %+v", e)
		}
	}
	t.Logf("stepped down %v before the next election (%s)", time.Duration(next.MonoNS-lost.MonoNS), lost.Error)
}

// The Go API: a session's tenure is revoked (ErrLost) when the lease is
// taken from its holder; a Backend without sessions says so.
func TestSessionWatchTenure(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, _ := url.Parse(sessionURL(c, c.Endpoints()))
	b, err := OpenURL(u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rec, err := b.Acquire(ctx, "w", "a", sessionTTL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.WatchTenure(ctx, "w", rec.Token+1); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("watch of a tenure not acquired here: %v, want ErrInvalid", err)
	}
	revoked, err := b.WatchTenure(ctx, "w", rec.Token)
	if err != nil {
		t.Fatal(err)
	}
	// Freed behind the holder's back (another client with its token, as
	// an operator would): the leader ends the session with "lost".
	other, err := OpenURL(u)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Release(ctx, "w", "a", rec.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-revoked:
		if !errors.Is(err, lease.ErrLost) {
			t.Fatalf("revoked with %v, want ErrLost", err)
		}
	case <-ctx.Done():
		t.Fatal("the tenure was not revoked")
	}

	plain, err := Open(Options{Endpoints: c.Endpoints(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.WatchTenure(ctx, "w", rec.Token); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("WatchTenure without sessions: %v, want ErrInvalid", err)
	}
}

// The cluster's leader killed under a session holder: the stream dies with
// it, and the holder either opens a session on the new leader within its
// bound and keeps the lease, or steps down; never do two participants
// hold the lease at once, and no session's end frees it on the new leader
// while its holder still holds it.
func TestSessionAcrossLeaderKill(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := leasetest.StartGroup(t, coordBin, sessionURL(c, c.Endpoints()), leasetest.NewName(), 2, "--ttl", sessionTTL.String())
	first := g.WaitEvent(t, sessionDeadline, "a first leader", func(e lease.Event) bool { return e.Event == lease.EventElected })
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	killedAt := eventlog.MonotonicNow()
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	// Either the holder kept its lease (a renewal after the kill, through
	// the new leader) or it stepped down and the other was elected.
	e := g.WaitEvent(t, sessionDeadline, "the holder's next move", func(e lease.Event) bool {
		return e.Event == lease.EventLost && e.ID == first.ID ||
			e.Event == lease.EventElected && e.ID != first.ID ||
			e.Event == lease.EventRenewed && e.ID == first.ID && e.MonoNS > killedAt
	})
	t.Logf("after the cluster leader's death: %s %s token %d %s", e.ID, e.Event, e.Token, e.Error)
	g.CheckOneLeader(t)
}

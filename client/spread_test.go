package client

import (
	"bytes"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// spreadClient returns a client of endpoints, in that order, with
// Config.Spread, that has learned which node answers where (the warm-up).
// wrap, if not nil, wraps its transport.
func spreadClient(t *testing.T, wrap func(http.RoundTripper) http.RoundTripper, endpoints ...string) *Client {
	t.Helper()
	cfg := DefaultConfig(endpoints...)
	cfg.Spread = true
	if wrap != nil {
		cfg.HTTPClient = &http.Client{Transport: wrap(NewTransport(cfg))}
	}
	cl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl.warmUp(testContext(t))
	return cl
}

// TestSpreadSendsRequestsToEveryMember: under Config.Spread, writes, reads
// and watches of keys go to every member, not only to the leader, and all
// succeed (the followers forward the writes, serve the reads by ReadIndex
// and the watches from their own state). Without Spread every one goes to
// the leader.
func TestSpreadSendsRequestsToEveryMember(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.leader()
	cl := spreadClient(t, nil, c.endpoints()...)
	ctx := testContext(t)
	const rounds = 30
	var rev uint64
	for i := range rounds {
		r, err := cl.Put(ctx, "spread", []byte{'a' + byte(i%26)})
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		rev = r
	}
	for i := range rounds {
		kv, err := cl.Get(ctx, "spread")
		if err != nil || kv.Revision < rev {
			// Linearizable: every read sees the last answered write,
			// whichever member serves it.
			t.Fatalf("get %d: revision %d (%v), want %d or later", i, kv.Revision, err, rev)
		}
		if kv, err := cl.WatchKey(ctx, "spread", 0, time.Minute); err != nil || kv.Revision < rev {
			t.Fatalf("watch %d: revision %d (%v), want %d or later at once", i, kv.Revision, err, rev)
		}
	}
	for id, ep := range c.https {
		for _, path := range []string{"/v1/kv/spread", "/v1/watch/kv/spread"} {
			// 2×rounds requests for /v1/kv/spread (puts and gets), rounds
			// for the watch: a third each in turn, give or take a retry.
			want := rounds / 3
			if path == "/v1/kv/spread" {
				want = 2 * rounds / 3
			}
			if got := c.servedAt(ep, path); got < want-2 {
				t.Errorf("node %d (leader %d) took %d requests for %s from the client, want about %d", id, leader, got, path, want)
			}
		}
	}
	// The leader the answers named is still the one the client follows
	// for what only the leader serves.
	if got, want := cl.preferredEndpoint(), endpointOf(t, cl, c.https[leader]); got != want {
		t.Errorf("the client prefers endpoint %d, want the leader's, %d", got, want)
	}
}

// TestSpreadFollowerAnswerDoesNotMoveTheClient: under Config.Spread a
// follower's answer names the leader (Coord-Leader), and the next request
// still goes to the next endpoint in turn, not to the leader; a renewal
// of a lease, which a follower would only forward over HTTP, goes to the
// leader.
func TestSpreadFollowerAnswerDoesNotMoveTheClient(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.leader()
	var order []string
	for id, ep := range c.https {
		if id != leader {
			order = append(order, ep)
		}
	}
	order = append(order, c.https[leader]) // the two followers first
	cl := spreadClient(t, nil, order...)
	ctx := testContext(t)
	for i, ep := range order {
		before := c.servedAt(ep, "/v1/kv/turn")
		if _, err := cl.Put(ctx, "turn", []byte("v")); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		if got := c.servedAt(ep, "/v1/kv/turn") - before; got != 1 {
			t.Fatalf("put %d: endpoint %d (%s, leader %s) took %d attempts, want 1: the put went elsewhere",
				i, i, ep, c.https[leader], got)
		}
	}
	l, err := cl.Acquire(ctx, "spread-lease", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := cl.Renew(ctx, "spread-lease", "holder", l.Token, 0); err != nil {
			t.Fatalf("renew %d: %v", i, err)
		}
	}
	if got := c.servedAt(c.https[leader], "/v1/leases/spread-lease/renew"); got != 3 {
		t.Fatalf("the leader took %d of 3 renewals, want all: a renewal must not spread", got)
	}
}

// TestSpreadSkipsAStoppedMember: a follower is stopped; under
// Config.Spread the client's writes still succeed, no attempt goes to the
// stopped member while the client holds it down (it failed to answer in
// the last second), and the two live members share its turns evenly
// rather than the one after it taking them all.
func TestSpreadSkipsAStoppedMember(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.leader()
	var dead, live uint64
	for id := range c.https {
		if id != leader {
			if dead == 0 {
				dead = id
			} else {
				live = id
			}
		}
	}
	deadEP := c.https[dead]
	var cp atomic.Pointer[Client]
	var deadAttempts, attemptsWhileDown atomic.Int64
	wrap := func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if cl := cp.Load(); cl != nil && r.URL.Host == deadEP && r.URL.Path == "/v1/kv/skip" {
				deadAttempts.Add(1)
				cl.mu.Lock()
				down := time.Now().Before(cl.downUntil[endpointOf(t, cl, deadEP)])
				cl.mu.Unlock()
				if down {
					attemptsWhileDown.Add(1)
				}
			}
			return next.RoundTrip(r)
		})
	}
	// The stopped member first: a plain turn past it would send its
	// turns to the next endpoint, the live follower.
	cl := spreadClient(t, wrap, deadEP, c.https[live], c.https[leader])
	cp.Store(cl)
	c.kill(dead)
	ctx := testContext(t)
	const puts = 30
	for i := range puts {
		if _, err := cl.Put(ctx, "skip", []byte("v")); err != nil {
			t.Fatalf("put %d with node %d stopped: %v", i, dead, err)
		}
	}
	if n := attemptsWhileDown.Load(); n != 0 {
		t.Fatalf("%d attempts went to the stopped node while the client held it down", n)
	}
	atLive, atLeader := c.servedAt(c.https[live], "/v1/kv/skip"), c.servedAt(c.https[leader], "/v1/kv/skip")
	if atLive+atLeader != puts {
		t.Fatalf("the live nodes took %d and %d puts, want %d in all", atLive, atLeader, puts)
	}
	// Each attempt at the stopped node (once a second, when the client
	// tries it again) sends that put to the leader, out of turn: the
	// shares may differ by that much, and one.
	if diff, slack := abs(atLive-atLeader), 1+2*int(deadAttempts.Load()); diff > slack {
		t.Fatalf("the live follower took %d puts and the leader %d (%d attempts at the stopped node): want shares within %d",
			atLive, atLeader, deadAttempts.Load(), slack)
	}
}

// TestSpreadUnknownOutcomeAtAFollowerAppliesOnce: under Config.Spread a
// put goes to a follower, which applies it (forwarded to the leader) but
// whose answer is lost: the client is told unknown_outcome, as a follower
// whose forward failed after it was sent answers. The client retries it
// under the same session and sequence number, at the leader first, and the
// cluster answers the retry with the first attempt's result: the put is
// applied once, and the client gets its revision. The retry rules are the
// client's usual ones; this guards that spreading keeps them.
func TestSpreadUnknownOutcomeAtAFollowerAppliesOnce(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.leader()
	follower := c.follower()
	cl := spreadClient(t, nil, follower, c.https[leader]) // the follower's turn first
	c.intercept(follower, "/v1/kv/once", func(w http.ResponseWriter, r *http.Request) {
		// Serve the put for real (the interception is used up, so this
		// request reaches the node's API), then lose its answer.
		body, _ := io.ReadAll(r.Body)
		req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+follower+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("the put through the follower: %v", err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the put through the follower: %s", resp.Status)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":"forward to the leader failed after it was sent","code":"unknown_outcome"}`))
	})
	ctx := testContext(t)
	rev, err := cl.Put(ctx, "once", []byte("v"))
	if err != nil {
		t.Fatalf("put: %v, want the retry to succeed", err)
	}
	if got := c.servedAt(follower, "/v1/kv/once"); got != 2 {
		t.Errorf("the follower took %d requests for the put, want 2 (the client's, intercepted, and the test's)", got)
	}
	if got := c.servedAt(c.https[leader], "/v1/kv/once"); got != 1 {
		t.Errorf("the leader took %d attempts of the put, want the retry", got)
	}
	kv, err := cl.Get(ctx, "once")
	if err != nil {
		t.Fatal(err)
	}
	if kv.Version != 1 || kv.Revision != rev {
		t.Fatalf("the key is at version %d, revision %d; want version 1 (applied once) at the revision the retry was answered with, %d",
			kv.Version, kv.Revision, rev)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

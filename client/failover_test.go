package client

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// endpointOf returns the index of the client's endpoint at addr.
func endpointOf(t *testing.T, c *Client, addr string) int {
	t.Helper()
	i, ok := c.index[addr]
	if !ok {
		t.Fatalf("no endpoint %s among %v", addr, c.cfg.Endpoints)
	}
	return i
}

func (c *Client) preferredEndpoint() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.preferred
}

// TestWarmUpFindsTheLeader: the warm-up's answers tell the client which
// node answers at each endpoint and which one leads, so that its first
// write goes straight to the leader, with no lookup of /v1/status.
func TestWarmUpFindsTheLeader(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.leader()
	cl := c.client(c.follower(), c.https[leader]) // the follower first
	cl.warmUp(testContext(t))
	if got, want := cl.preferredEndpoint(), endpointOf(t, cl, c.https[leader]); got != want {
		t.Fatalf("after the warm-up the client prefers endpoint %d, want the leader's, %d", got, want)
	}
	attempts := cl.counts.attempts.Load()
	if _, err := cl.Put(testContext(t), "warm", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if n := cl.counts.attempts.Load() - attempts; n != 1 {
		t.Fatalf("the write took %d attempts, want 1 (straight to the leader)", n)
	}
	if n := cl.counts.lookups.Load(); n != 0 {
		t.Fatalf("%d lookups of the leader, want none", n)
	}
}

// TestKilledLeaderIsReplacedWithoutALookup: the leader dies (its API and
// Raft connections close, as when its process is killed). The client's
// next write fails over through the endpoints it already knows, and the
// answer that names the new leader (Coord-Leader) sends the client
// straight there: no lookup of /v1/status (which the client rate-limits
// to once a second), and the write after it takes one attempt.
func TestKilledLeaderIsReplacedWithoutALookup(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.leader()
	cl := c.client()
	ctx := testContext(t)
	cl.warmUp(ctx)
	if _, err := cl.Put(ctx, "failover", []byte("before")); err != nil {
		t.Fatal(err)
	}
	if got, want := cl.preferredEndpoint(), endpointOf(t, cl, c.https[leader]); got != want {
		t.Fatalf("before the kill the client prefers endpoint %d, want the leader's, %d", got, want)
	}
	c.kill(leader)
	if _, err := cl.Put(ctx, "failover", []byte("during")); err != nil {
		t.Fatalf("write after the kill: %v", err)
	}
	next := c.leader()
	if next == leader {
		t.Fatalf("node %d still leads after it was killed", leader)
	}
	attempts := cl.counts.attempts.Load()
	if _, err := cl.Put(ctx, "failover", []byte("after")); err != nil {
		t.Fatal(err)
	}
	if n := cl.counts.attempts.Load() - attempts; n != 1 {
		t.Fatalf("the write after the failover took %d attempts, want 1 (straight to the new leader %d)", n, next)
	}
	if got, want := cl.preferredEndpoint(), endpointOf(t, cl, c.https[next]); got != want {
		t.Fatalf("the client prefers endpoint %d, want the new leader's, %d", got, want)
	}
	if n := cl.counts.lookups.Load(); n != 0 {
		t.Fatalf("%d lookups of the leader's address, want none: the answers named it", n)
	}
}

// TestRefusalHintIsFollowedNext: a node that refuses a write and names
// the leader (a node that just handed leadership over, or a follower
// whose forward failed) sends the client's next attempt to that leader,
// ahead of the endpoints in between, which see no write.
func TestRefusalHintIsFollowedNext(t *testing.T) {
	var writes [3]atomic.Int64
	node := func(i int, answer func(w http.ResponseWriter)) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Coord-Node", string(rune('1'+i)))
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Path == "/healthz" {
				w.Write([]byte("ok\n"))
				return
			}
			writes[i].Add(1)
			answer(w)
		}))
	}
	unavailable := func(leader string) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			if leader != "" {
				w.Header().Set("Coord-Leader", leader)
			}
			w.WriteHeader(503)
			w.Write([]byte(`{"error":"not the leader","code":"unavailable"}`))
		}
	}
	stopping := node(0, unavailable("3")) // node 1: handed over to node 3
	noLeader := node(1, unavailable(""))  // node 2: knows no leader yet
	leader := node(2, func(w http.ResponseWriter) {
		w.Header().Set("Coord-Leader", "3")
		w.Write([]byte(`{"revision":9}`))
	})
	for _, s := range []*httptest.Server{stopping, noLeader, leader} {
		defer s.Close()
	}
	var eps []string
	for _, s := range []*httptest.Server{stopping, noLeader, leader} {
		eps = append(eps, strings.TrimPrefix(s.URL, "http://"))
	}
	cfg := DefaultConfig(eps...)
	cfg.WarmInterval = 0
	cl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl.warmUp(testContext(t))
	cl.mu.Lock()
	cl.preferred = 0 // as if node 1 had led until now
	cl.mu.Unlock()
	if rev, err := cl.Put(testContext(t), "k", nil); err != nil || rev != 9 {
		t.Fatalf("put: %d, %v", rev, err)
	}
	if got := [3]int64{writes[0].Load(), writes[1].Load(), writes[2].Load()}; got != [3]int64{1, 0, 1} {
		t.Fatalf("writes per node %v, want [1 0 1]: the hint of node 1 sends the retry to node 3", got)
	}
	if cl.counts.hints.Load() == 0 {
		t.Fatal("no hint followed")
	}
}

package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coord/api"
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

// refusal answers as a node that cannot serve a write does: 503
// unavailable, naming itself (Coord-Node) and the leader it knows
// (Coord-Leader; 0: none).
func refusal(node, leader uint64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.HeaderNode, strconv.FormatUint(node, 10))
		if leader != 0 {
			w.Header().Set(api.HeaderLeader, strconv.FormatUint(leader, 10))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":"not the leader","code":"unavailable"}`))
	}
}

// TestNamedLeaderIsRetriedWithoutBackoff: a refusal that names the leader
// is a redirect, not a failure. The leader refuses a write once (as a node
// does while it is still becoming leader), then a follower refuses it
// naming that leader (as one whose forward failed does): the round has
// tried both, yet the next attempt goes to the named leader at once, not
// after the back-off. The back-off here outlasts the write's context, so
// a write that waited for it would fail.
func TestNamedLeaderIsRetriedWithoutBackoff(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.leader()
	follower := c.follower()
	var followerID uint64
	for id, ep := range c.https {
		if ep == follower {
			followerID = id
		}
	}
	cl := warmClientNoBackoff(t, c.https[leader], follower)
	c.intercept(c.https[leader], "/v1/kv/redirect", refusal(leader, 0))
	c.intercept(follower, "/v1/kv/redirect", refusal(followerID, leader))
	// The leader's second request: its refusal, then the write.
	reached := c.awaitCount(c.https[leader], "/v1/kv/redirect", 2)
	attempts := cl.counts.attempts.Load() // the warm-up's
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cl.Put(ctx, "redirect", []byte("v")); err != nil {
		t.Fatalf("put: %v (a back-off after the named refusal outlasts the context)", err)
	}
	within(t, reached, "the write back at the leader")
	if n := cl.counts.attempts.Load() - attempts; n != 3 {
		t.Fatalf("%d attempts, want 3: the leader's refusal, the follower's, the leader's answer", n)
	}
	if n := cl.counts.redirects.Load(); n != 1 {
		t.Fatalf("%d redirects, want 1", n)
	}
	mustGet(t, testContext(t), cl, "redirect", "v", mustRevision(t, cl, "redirect"))
}

// warmClientNoBackoff is a client of endpoints, warmed up once and never
// again, whose back-off lasts an hour: a test that sees its write answered
// in time knows no back-off came before it.
func warmClientNoBackoff(t *testing.T, endpoints ...string) *Client {
	t.Helper()
	cfg := DefaultConfig(endpoints...)
	cfg.WarmInterval = 0
	cfg.BackoffMin, cfg.BackoffMax = time.Hour, time.Hour
	cl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl.warmUp(testContext(t))
	return cl
}

// mustRevision returns key's revision.
func mustRevision(t *testing.T, c *Client, key string) uint64 {
	t.Helper()
	kv, err := c.Get(testContext(t), key)
	if err != nil {
		t.Fatal(err)
	}
	return kv.Revision
}

// TestNodesNamingEachOtherBackOff: two nodes that refuse every write, each
// naming the other (a candidate named by a stale follower), get one
// immediate redirect each, then the client backs off: no spin.
func TestNodesNamingEachOtherBackOff(t *testing.T) {
	var attempts [2]atomic.Int64
	var servers [2]*httptest.Server
	for i := range servers {
		refuse := refusal(uint64(i+1), uint64(2-i))
		servers[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" {
				w.Header().Set(api.HeaderNode, strconv.Itoa(i+1))
				w.Write([]byte("ok\n"))
				return
			}
			attempts[i].Add(1)
			refuse(w, r)
		}))
		defer servers[i].Close()
	}
	cl := warmClientNoBackoff(t, strings.TrimPrefix(servers[0].URL, "http://"), strings.TrimPrefix(servers[1].URL, "http://"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := cl.Put(ctx, "k", nil); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrUnknown) {
		t.Fatalf("put: %v, want unavailable (and known: every answer was a refusal)", err)
	}
	if got := attempts[0].Load() + attempts[1].Load(); got > 4 {
		t.Fatalf("%d attempts before the back-off, want at most 4 (one redirect per node)", got)
	}
	if n := cl.counts.redirects.Load(); n == 0 || n > 2 {
		t.Fatalf("%d redirects, want 1 or 2", n)
	}
}

// TestSlowLeaderIsAwaited: a leader that is alive but slow (its answer
// to a write takes many attempt timeouts, as under overload) is awaited:
// its readiness probe answers, so the write is neither abandoned nor
// retried through another node, and it applies once, on its one attempt.
func TestSlowLeaderIsAwaited(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.leader()
	cfg := DefaultConfig(c.endpoints()...)
	cfg.WarmInterval = 0
	cfg.AttemptTimeout = 400 * time.Millisecond // the write outlasts it many times over; its probes get 200 ms, a margin for a loaded machine
	cl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	cl.warmUp(ctx)
	release := make(chan struct{})
	api := c.servers[leader].Handler
	c.intercept(c.https[leader], "/v1/kv/slow", func(w http.ResponseWriter, r *http.Request) {
		<-release // a slow leader: answers once the test has seen it probed
		api.ServeHTTP(w, r)
	})
	attempts := cl.counts.attempts.Load()
	put := async(func() (uint64, error) { return cl.Put(ctx, "slow", []byte("v")) })
	// Two probes of the leader while it holds the write: the attempt
	// outlived its timeout at least twice and was kept.
	for range 2 {
		within(t, c.awaitAt(c.https[leader], "/readyz"), "a readiness probe of the slow leader")
	}
	close(release)
	r := within(t, put, "the slow write")
	if r.err != nil {
		t.Fatalf("slow write: %v", r.err)
	}
	if n := cl.counts.attempts.Load() - attempts; n != 1 {
		t.Fatalf("the slow write took %d attempts, want 1: a live leader's slow answer is awaited, not retried elsewhere", n)
	}
	if cl.counts.awaited.Load() == 0 {
		t.Fatal("no attempt was awaited past its timeout")
	}
	kv, err := cl.Get(ctx, "slow")
	if err != nil || string(kv.Value) != "v" || kv.Revision != r.v || kv.Version != 1 {
		t.Fatalf("get: %+v %v, want v at revision %d, version 1 (applied once)", kv, err, r.v)
	}
}

// TestUnresponsiveNodeIsAbandoned: a node that holds a write past the
// attempt timeout and fails its readiness probe (does not answer it, or
// answers that it is not ready) is abandoned, and the write goes to the
// next node.
func TestUnresponsiveNodeIsAbandoned(t *testing.T) {
	for _, tt := range []struct {
		name  string
		ready http.HandlerFunc
	}{
		{"probe unanswered", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		{"not ready", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/readyz" {
					tt.ready(w, r)
					return
				}
				<-r.Context().Done()
			}))
			defer stuck.Close()
			var served atomic.Int64
			good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(`{"revision":4}`))
			}))
			defer good.Close()
			cfg := DefaultConfig(strings.TrimPrefix(stuck.URL, "http://"), strings.TrimPrefix(good.URL, "http://"))
			cfg.WarmInterval = 0
			cfg.AttemptTimeout = 200 * time.Millisecond
			cl, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if rev, err := cl.Put(testContext(t), "k", nil); err != nil || rev != 4 {
				t.Fatalf("put: %d %v, want revision 4 from the second node", rev, err)
			}
			if n := cl.counts.attempts.Load(); n != 2 {
				t.Fatalf("%d attempts, want 2: the stuck node's, abandoned, then the good node's", n)
			}
			if cl.counts.probes.Load() != 1 || cl.counts.awaited.Load() != 0 || served.Load() != 1 {
				t.Fatalf("probes %d, awaited %d, served %d: want 1, 0, 1", cl.counts.probes.Load(), cl.counts.awaited.Load(), served.Load())
			}
		})
	}
}

// TestSlowWritesShareAProbe: many writes held by one slow node share its
// readiness probes (one in flight at a time per node, its answer reused
// while fresh), rather than each sending its own on a new connection.
func TestSlowWritesShareAProbe(t *testing.T) {
	const writes = 16
	var mu sync.Mutex
	arrived, probes := 0, 0
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if r.URL.Path == "/readyz" {
			// Once every write is held, three probes: each write outlived
			// its attempt timeout at least once while held.
			if arrived == writes {
				if probes++; probes == 3 {
					close(release)
				}
			}
			mu.Unlock()
			w.Write([]byte("ok\n"))
			return
		}
		arrived++
		mu.Unlock()
		<-release
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"revision":1}`))
	}))
	defer srv.Close()
	cfg := DefaultConfig(strings.TrimPrefix(srv.URL, "http://"))
	cfg.WarmInterval = 0
	cfg.AttemptTimeout = 400 * time.Millisecond
	cl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	var results []<-chan result[uint64]
	for range writes {
		results = append(results, async(func() (uint64, error) { return cl.Put(ctx, "k", nil) }))
	}
	for _, r := range results {
		if r := within(t, r, "a slow write"); r.err != nil {
			t.Fatal(r.err)
		}
	}
	attempts, sent, awaited := cl.counts.attempts.Load(), cl.counts.probes.Load(), cl.counts.awaited.Load()
	// Without sharing, every await would have had a probe of its own.
	if attempts != writes || sent == 0 || sent*2 > awaited {
		t.Fatalf("attempts %d, probes %d, attempts awaited past a probe %d: want %d attempts (none retried), at least 2 awaits per probe",
			attempts, sent, awaited, writes)
	}
}

// TestNodeAnsweringOthersIsAwaited: a node that keeps answering the
// client's other requests is making progress, so a slow request there is
// awaited without a probe, even though its probe would say "not ready".
func TestNodeAnsweringOthersIsAwaited(t *testing.T) {
	release := make(chan struct{})
	var readyz atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			readyz.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case "/v1/kv/slow":
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"revision":1}`))
	}))
	defer srv.Close()
	cfg := DefaultConfig(strings.TrimPrefix(srv.URL, "http://"), deadEndpoint(t))
	cfg.WarmInterval = 0
	cfg.AttemptTimeout = 100 * time.Millisecond
	cl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	slow := async(func() (uint64, error) { return cl.Put(ctx, "slow", nil) })
	// Other writes, answered at once, until the slow one was awaited
	// past its timeout twice.
	for i := 0; cl.counts.awaited.Load() < 2; i++ {
		if i == 20000 || ctx.Err() != nil {
			t.Fatalf("the slow write was awaited %d times in %d other writes", cl.counts.awaited.Load(), i)
		}
		if _, err := cl.Put(ctx, "fast", nil); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if r := within(t, slow, "the slow write"); r.err != nil {
		t.Fatal(r.err)
	}
	if n := readyz.Load(); n != 0 {
		t.Fatalf("%d readiness probes, want none: the node was answering", n)
	}
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestAnswerThatBeatsAFailedProbeIsKept: a node's answer whose headers
// arrive while a readiness probe of that node is out is read whole, even
// when the probe then fails: the attempt was answered, not abandoned, and
// the write is not sent again.
func TestAnswerThatBeatsAFailedProbeIsKept(t *testing.T) {
	probeSeen, headersIn, probeAnswered := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var probeOnce, headersOnce, seenOnce sync.Once
	var writes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			seenOnce.Do(func() { close(probeSeen) })
			<-headersIn // the write's headers reached the client first
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if r.Method != http.MethodPut {
			http.Error(w, "not here", http.StatusNotFound)
			return
		}
		writes.Add(1)
		<-probeSeen
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-probeAnswered
		// The body ends once the client had the probe's failure in hand.
		// A wrong cancel would come within microseconds; this bound is
		// the time it gets to show, not a wait for a state.
		select {
		case <-r.Context().Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		w.Write([]byte(`{"revision":4}`))
	}))
	defer srv.Close()
	next := &http.Transport{}
	defer next.CloseIdleConnections()
	cfg := DefaultConfig(strings.TrimPrefix(srv.URL, "http://"))
	cfg.WarmInterval = 0
	cfg.AttemptTimeout = time.Second // the probe goes at 0.5 s; the body has 1 s from the headers
	cfg.HTTPClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(r)
		switch {
		case r.URL.Path == "/readyz":
			probeOnce.Do(func() { close(probeAnswered) })
		case r.Method == http.MethodPut && err == nil:
			headersOnce.Do(func() { close(headersIn) })
		}
		return resp, err
	})}
	cl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rev, err := cl.Put(testContext(t), "k", nil); err != nil || rev != 4 {
		t.Fatalf("put: %d %v, want revision 4 from the first answer", rev, err)
	}
	if n, w := cl.counts.attempts.Load(), writes.Load(); n != 1 || w != 1 {
		t.Fatalf("%d attempts, %d writes at the node: want 1 and 1 (the answer was kept)", n, w)
	}
}

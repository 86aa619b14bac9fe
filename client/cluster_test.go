package client

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"coord/api"
	"coord/server"
)

// testCluster is a coord cluster in this process: real nodes, each with a
// data directory, a Raft transport on loopback TCP and the HTTP API on a
// loopback listener. Only the HTTP handler is wrapped, to tell a test when
// a request has reached the leader, so that the test can act while the
// leader serves it.
type testCluster struct {
	t       *testing.T
	nodes   map[uint64]*server.Node
	https   map[uint64]string // node ID → HTTP address
	servers map[uint64]*http.Server

	mu      sync.Mutex
	arrived map[string]chan struct{} // URL path → closed when it reaches the leader
	// intercepts: HTTP address + URL path → a handler that serves the next
	// request for it instead of the node's API (once).
	intercepts map[string]http.HandlerFunc
	// counted: URL path (as arrived keys it) → the requests for it still
	// awaited by awaitCount, and the channel closed when none is.
	counted map[string]*awaitedCount
	// served: HTTP address + URL path → the requests for it the node at
	// that address took from a client (not forwarded by another node).
	served map[string]int
}

// awaitedCount is what awaitCount waits for.
type awaitedCount struct {
	left int
	done chan struct{}
}

func startCluster(t *testing.T, size int) *testCluster {
	t.Helper()
	c := &testCluster{t: t, nodes: map[uint64]*server.Node{}, https: map[uint64]string{}, servers: map[uint64]*http.Server{}, arrived: map[string]chan struct{}{},
		intercepts: map[string]http.HandlerFunc{}, counted: map[string]*awaitedCount{}, served: map[string]int{}}
	peers := map[uint64]string{}
	raftListeners := map[uint64]net.Listener{}
	httpListeners := map[uint64]net.Listener{}
	for id := uint64(1); id <= uint64(size); id++ {
		raftListeners[id], httpListeners[id] = loopbackListener(t), loopbackListener(t)
		peers[id] = raftListeners[id].Addr().String()
		c.https[id] = httpListeners[id].Addr().String()
	}
	quiet := slog.New(slog.DiscardHandler)
	for id := uint64(1); id <= uint64(size); id++ {
		cfg := server.DefaultConfig()
		cfg.ID, cfg.Peers, cfg.PeerListener, cfg.DataDir = id, peers, raftListeners[id], t.TempDir()
		cfg.HTTPAddr, cfg.Logger = c.https[id], quiet
		cfg.TickInterval = 20 * time.Millisecond
		node, err := server.NewNode(cfg)
		if err != nil {
			t.Fatalf("node %d: %v", id, err)
		}
		c.nodes[id] = node
		nodeAPI := server.NewAPI(node, server.APIConfig{Logger: quiet})
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if st := node.Status(); st.Leader == st.ID {
				c.reached(r.URL.Path)
			}
			c.reached(c.https[id] + r.URL.Path)
			if r.Header.Get(api.HeaderForwarded) == "" {
				c.serve(c.https[id] + r.URL.Path)
			}
			if h := c.intercepted(c.https[id] + r.URL.Path); h != nil {
				h(w, r)
				return
			}
			nodeAPI.ServeHTTP(w, r)
		})}
		c.servers[id] = srv
		go srv.Serve(httpListeners[id])
		t.Cleanup(func() {
			srv.Close()
			node.Close()
		})
	}
	return c
}

// kill stops node id as its process dying would: its API's listener and
// connections close, and so do its Raft connections, which its followers
// see close (the leader-gone hint). Later calls of leader() leave it out;
// its address stays among the endpoints.
func (c *testCluster) kill(id uint64) {
	c.t.Helper()
	c.servers[id].Close()
	if err := c.nodes[id].Close(); err != nil {
		c.t.Fatalf("close node %d: %v", id, err)
	}
	delete(c.nodes, id)
}

func loopbackListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// endpoints returns every node's HTTP address.
func (c *testCluster) endpoints() []string {
	var eps []string
	for _, ep := range c.https {
		eps = append(eps, ep)
	}
	return eps
}

// leader waits until a node leads and every node knows it, and returns
// its ID.
func (c *testCluster) leader() uint64 {
	c.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(deadline)}}
		for _, n := range c.nodes {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(n.StatusChanged())})
		}
		var leader uint64
		agree := true
		for _, n := range c.nodes {
			st := n.Status()
			agree = agree && st.Leader != 0 && (leader == 0 || st.Leader == leader)
			leader = st.Leader
		}
		if agree {
			return leader
		}
		if chosen, _, _ := reflect.Select(cases); chosen == 0 {
			c.t.Fatal("no agreed leader within 30s")
		}
	}
}

// follower returns the HTTP address of a node that does not lead.
func (c *testCluster) follower() string {
	leader := c.leader()
	for id, ep := range c.https {
		if id != leader {
			return ep
		}
	}
	c.t.Fatal("no follower")
	return ""
}

// awaitLeader returns a channel closed when the next request for path (as
// the server sees it, unescaped) reaches the leader.
func (c *testCluster) awaitLeader(path string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	c.arrived[path] = ch
	return ch
}

// awaitAt returns a channel closed when the next request for path reaches
// the node at HTTP address ep, whether it leads or not.
func (c *testCluster) awaitAt(ep, path string) <-chan struct{} {
	return c.awaitLeader(ep + path)
}

// intercept makes h serve the next request for path at the node at HTTP
// address ep, in place of the node's API.
func (c *testCluster) intercept(ep, path string, h http.HandlerFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.intercepts[ep+path] = h
}

// intercepted returns (and forgets) the handler intercept set for path.
func (c *testCluster) intercepted(path string) http.HandlerFunc {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.intercepts[path]
	delete(c.intercepts, path)
	return h
}

// awaitCount returns a channel closed when n more requests for path have
// reached the node at HTTP address ep (from the call on).
func (c *testCluster) awaitCount(ep, path string, n int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &awaitedCount{left: n, done: make(chan struct{})}
	c.counted[ep+path] = w
	return w.done
}

func (c *testCluster) reached(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.counted[path]; w != nil {
		if w.left--; w.left == 0 {
			close(w.done)
			delete(c.counted, path)
		}
	}
	if ch := c.arrived[path]; ch != nil {
		close(ch)
		delete(c.arrived, path)
	}
}

// serve counts a request a client sent to path (HTTP address + URL path).
func (c *testCluster) serve(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.served[path]++
}

// servedAt returns how many requests for path clients sent to the node at
// HTTP address ep.
func (c *testCluster) servedAt(ep, path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.served[ep+path]
}

// client returns a client of the given endpoints (all nodes if none).
func (c *testCluster) client(endpoints ...string) *Client {
	c.t.Helper()
	if len(endpoints) == 0 {
		endpoints = c.endpoints()
	}
	cl, err := New(DefaultConfig(endpoints...))
	if err != nil {
		c.t.Fatal(err)
	}
	return cl
}

// testContext bounds a test's requests generously: a request that should
// return at once but blocks fails the test at this deadline.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// within waits for a result on ch, failing the test after a generous wait.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no answer within 20s", what)
		var zero T
		return zero
	}
}

// result is what a call run on its own goroutine returned.
type result[T any] struct {
	v   T
	err error
}

// async runs call on its own goroutine and delivers its result.
func async[T any](call func() (T, error)) <-chan result[T] {
	ch := make(chan result[T], 1)
	go func() {
		v, err := call()
		ch <- result[T]{v, err}
	}()
	return ch
}

// watchKey runs WatchKey on its own goroutine.
func watchKey(ctx context.Context, c *Client, key string, revision uint64, wait time.Duration) <-chan result[KeyValue] {
	return async(func() (KeyValue, error) { return c.WatchKey(ctx, key, revision, wait) })
}

// watchLease runs WatchLease on its own goroutine.
func watchLease(ctx context.Context, c *Client, name string, revision uint64, wait time.Duration) <-chan result[Lease] {
	return async(func() (Lease, error) { return c.WatchLease(ctx, name, revision, wait) })
}

// conflictRevision returns the current revision a conflict carries,
// failing the test if err is not a conflict.
func conflictRevision(t *testing.T, err error, what string) uint64 {
	t.Helper()
	var e *Error
	if !errors.Is(err, ErrConflict) || !errors.As(err, &e) {
		t.Fatalf("%s: err %v, want a conflict", what, err)
	}
	return e.Revision
}

// mustGet reads key, failing the test unless it has value at revision.
func mustGet(t *testing.T, ctx context.Context, c *Client, key, value string, revision uint64) {
	t.Helper()
	kv, err := c.Get(ctx, key)
	if err != nil || kv.Key != key || string(kv.Value) != value || kv.Revision != revision {
		t.Fatalf("get %q: %q=%q at %d (%v), want %q at %d", key, kv.Key, kv.Value, kv.Revision, err, value, revision)
	}
}

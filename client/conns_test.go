package client

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
)

// countDials makes the client's own transport count the connections it
// dials. It must be called before the client's first request.
func countDials(t *testing.T, c *Client) *atomic.Int64 {
	t.Helper()
	tr, ok := c.http.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("the client's transport is a %T, want its own *http.Transport", c.http.Transport)
	}
	var dials atomic.Int64
	var dialer net.Dialer
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dialer.DialContext(ctx, network, addr)
	}
	return &dials
}

// TestConcurrentLongPollsReuseConnections: a client with its own HTTP/1.1
// transport runs N long polls of one key at once (N connections over
// HTTP/1.1), a write wakes them all, and N more run at once: they go over
// the connections the first N left idle. A per-node cap on idle
// connections below N closed the rest as their polls ended, and the
// second round dialed them again (at least N-64 more with the old cap of
// 64). Asserted is a count of dials, not a time.
func TestConcurrentLongPollsReuseConnections(t *testing.T) {
	const watchers = 200
	cluster := startCluster(t, 1)
	ep := cluster.endpoints()[0]
	cfg := DefaultConfig(ep)
	cfg.NoWire = true // HTTP/1.1's connections are what this test counts
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dials := countDials(t, c)
	ctx := testContext(t)

	rev, err := c.Put(ctx, "polled", []byte("v0"))
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		arrived := cluster.awaitCount(ep, "/v1/watch/kv/polled", watchers)
		results := make([]<-chan result[KeyValue], watchers)
		for i := range results {
			results[i] = watchKey(ctx, c, "polled", rev, watchForever)
		}
		within(t, arrived, "the long polls reaching the node")
		if rev, err = c.Put(ctx, "polled", []byte("v"+strconv.Itoa(round+1))); err != nil {
			t.Fatal(err)
		}
		for i, ch := range results {
			r := within(t, ch, "a long poll")
			if r.err != nil || r.v.Revision != rev {
				t.Fatalf("round %d, poll %d: %+v %v, want revision %d", round, i, r.v, r.err, rev)
			}
		}
		t.Logf("round %d: %d connections dialed in all", round, dials.Load())
	}
	// The first round dials one connection per poll (a few of them may
	// have carried the writes and the warm-up first). Slack for the race
	// inside net/http between a body's end and its connection's return
	// to the idle pool (a request that finds none dials, and the spare
	// connection is kept): a quarter of N, far below the N-64 a small cap
	// costs.
	if n, most := dials.Load(), int64(watchers+watchers/4+2); n > most {
		t.Fatalf("%d connections dialed for two rounds of %d concurrent long polls; want at most %d (they were closed and dialed again)", n, watchers, most)
	}
}

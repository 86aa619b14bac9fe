package client

import (
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// TestWireFallbackForIsHowLongTheClientKeepsToHTTP: against a node that
// speaks HTTP/1.1 only (the test cluster's), a client with the default
// WireFallbackFor tries wire once (one connection, answered 400) and then
// keeps to HTTP/1.1 for the rest of the minute; with a WireFallbackFor shorter than
// the time between two requests, every request tries wire again on a new
// connection first. Counted are connections, not times.
func TestWireFallbackForIsHowLongTheClientKeepsToHTTP(t *testing.T) {
	const requests = 6
	cluster := startCluster(t, 1)
	for _, c := range []struct {
		fallbackFor time.Duration
		connections func(n int64) bool
		want        string
	}{
		// One that tried wire, one over HTTP/1.1, and slack for the race
		// inside net/http between a body's end and its connection's
		// return to the idle pool (a request that finds none dials).
		{time.Minute, func(n int64) bool { return n <= 3 }, "at most 3 (one that tried wire, one or two over HTTP/1.1)"},
		{time.Nanosecond, func(n int64) bool { return n >= requests+1 }, "one per request that tried wire, and one over HTTP/1.1"},
	} {
		l := &countingListener{Listener: loopbackListener(t)}
		srv := &http.Server{Handler: cluster.servers[1].Handler}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })

		cfg := DefaultConfig(l.Addr().String())
		cfg.WarmInterval = 0
		cfg.WireFallbackFor = c.fallbackFor
		cl, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := testContext(t)
		for range requests {
			if _, err := cl.Put(ctx, "k", []byte("v")); err != nil {
				t.Fatalf("WireFallbackFor %v: %v", c.fallbackFor, err)
			}
		}
		if n := l.accepted.Load(); !c.connections(n) {
			t.Fatalf("WireFallbackFor %v: %d requests made %d connections, want %s", c.fallbackFor, requests, n, c.want)
		}
	}
	if d := DefaultConfig("a:1").WireFallbackFor; d != time.Minute {
		t.Fatalf("default WireFallbackFor %v, want a minute", d)
	}
}

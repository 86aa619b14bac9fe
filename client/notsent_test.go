package client

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"coord/apiwire"
)

// TestWriteThatWaitedForAStreamIsNotOfUnknownOutcome: a write whose
// context ends while it waits for a stream of the client's multiplexed
// connection (every stream held, here by one long poll on a transport
// that allows one) never left the client: it fails as unavailable, with
// apiwire.ErrNotSent and the context's error, and not as ErrUnknown; and
// the key was indeed not written.
func TestWriteThatWaitedForAStreamIsNotOfUnknownOutcome(t *testing.T) {
	cluster := startCluster(t, 1)
	ep := cluster.endpoints()[0]
	wireEp := serveWire(t, cluster.servers[1].Handler)
	limits := apiwire.DefaultLimits()
	limits.StreamsMax = 1
	tr := apiwire.NewTransport(apiwire.TransportConfig{Limits: limits})
	t.Cleanup(tr.CloseIdleConnections)
	cfg := DefaultConfig(wireEp)
	cfg.HTTPClient = &http.Client{Transport: tr}
	cfg.WarmInterval = 0 // the long poll alone holds the stream
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	rev, err := c.Put(ctx, "held", []byte("v0"))
	if err != nil {
		t.Fatal(err)
	}
	arrived := cluster.awaitAt(ep, "/v1/watch/kv/held")
	polled := watchKey(ctx, c, "held", rev, watchForever)
	within(t, arrived, "the long poll reaching the node")

	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = c.Put(wctx, "waited", []byte("never sent"))
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, apiwire.ErrNotSent) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write that waited in vain for a stream: %v, want unavailable, apiwire.ErrNotSent and DeadlineExceeded", err)
	}
	if errors.Is(err, ErrUnknown) {
		t.Fatalf("a write that never left the client is of unknown outcome: %v", err)
	}

	// Another client's write of the key ends the long poll, which frees
	// the stream; the write that waited is nowhere.
	other := cluster.client(ep)
	if rev, err = other.Put(ctx, "held", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if r := within(t, polled, "the long poll"); r.err != nil || r.v.Revision != rev {
		t.Fatalf("long poll: %+v %v, want revision %d", r.v, r.err, rev)
	}
	if kv, err := c.Get(ctx, "waited"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the write that was not sent: %+v, %v, want ErrNotFound", kv, err)
	}
}

// serveWire serves h over coord's multiplexed connection (and HTTP/1.1)
// on a loopback listener of its own, as a node does by default (the test
// cluster's nodes speak HTTP/1.1 only), and returns its address.
func serveWire(t *testing.T, h http.Handler) string {
	t.Helper()
	inner := loopbackListener(t)
	ws := apiwire.NewServer(h, apiwire.ServerConfig{Logger: slog.New(slog.DiscardHandler)})
	l := apiwire.NewListener(inner, apiwire.ListenerConfig{SortTimeout: 10 * time.Second}, func(c net.Conn) { ws.ServeConn(c) })
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close(); ws.Drain() })
	return l.Addr().String()
}

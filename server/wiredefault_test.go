package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"coord/apiwire"
	"coord/client"
)

// keysIf returns new API keys if secure, nil otherwise.
func keysIf(t *testing.T, secure bool) *apiKeys {
	if !secure {
		return nil
	}
	return newAPIKeys(t)
}

// defaultClient returns a client of s with the client package's default
// transport (no warm-up, so that the connections counted are the
// requests').
func defaultClient(t *testing.T, s *apiServer) *client.Client {
	t.Helper()
	cfg := client.DefaultConfig(s.base)
	cfg.WarmInterval = 0
	if s.roots != nil {
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: s.roots}
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// putGet writes key and reads it back through c.
func putGet(ctx context.Context, t *testing.T, c *client.Client, key, value string) {
	t.Helper()
	if _, err := c.Put(ctx, key, []byte(value)); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	kv, err := c.Get(ctx, key)
	if err != nil || string(kv.Value) != value {
		t.Fatalf("get %s: %q %v, want %q", key, kv.Value, err, value)
	}
}

// The client's default transport against a node that serves wire and
// against one run with --wire=false, over TLS and in clear: both answer,
// the first over one wire connection (the node counts it), the second
// over HTTP/1.1 with the node remembered: over TLS the connection whose
// handshake chose http/1.1 carries every request; in clear one connection
// tried wire (its preface answered as a bad request) and one carries
// every request.
func TestDefaultClientAgainstWireAndHTTPNodes(t *testing.T) {
	for _, secure := range []bool{false, true} {
		for _, wire := range []bool{true, false} {
			t.Run(fmt.Sprintf("tls=%v,wire=%v", secure, wire), func(t *testing.T) {
				s := startAPIServer(t, "127.0.0.1:0", keysIf(t, secure), false, wire, DefaultHTTPLimits())
				c := defaultClient(t, s)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				for i := range 3 {
					putGet(ctx, t, c, fmt.Sprintf("k%d", i), strings.Repeat("v", i+1))
				}
				wantWire, wantConns := 0.0, 2.0
				if wire {
					wantWire, wantConns = 1, 1
				} else if secure {
					wantConns = 1
				}
				if got := testutil.ToFloat64(s.metrics.wireConnections); got != wantWire {
					t.Errorf("the node served %v wire connections, want %v", got, wantWire)
				}
				if got := testutil.ToFloat64(s.metrics.connectionsAccepted); got != wantConns {
					t.Errorf("the node accepted %v connections for 6 requests, want %v", got, wantConns)
				}
			})
		}
	}
}

// A node restarted on its address with --wire=false is sent HTTP/1.1 by a
// client that spoke wire to it; the request that met the closed
// connection is retried by the client, as over HTTP.
func TestDefaultClientAcrossARestartWithoutWire(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", secure), func(t *testing.T) {
			keys, replica := keysIf(t, secure), newFake(1, 1)
			s := serveAPI(t, replica, "127.0.0.1:0", keys, false, true, DefaultHTTPLimits())
			c := defaultClient(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			putGet(ctx, t, c, "before", "1")
			if got := testutil.ToFloat64(s.metrics.wireConnections); got != 1 {
				t.Fatalf("before the restart: %v wire connections, want 1", got)
			}
			s.stop()
			_, addr, _ := strings.Cut(s.base, "://")
			s2 := serveAPI(t, replica, addr, keys, false, false, DefaultHTTPLimits())
			putGet(ctx, t, c, "after", "2")
			if got := testutil.ToFloat64(s2.metrics.wireConnections); got != 0 {
				t.Fatalf("after the restart without wire: %v wire connections, want 0", got)
			}
		})
	}
}

// With the connection limit N reached by N connections served (one wire,
// one HTTP/1.1), one more is closed where it is accepted, before a TLS
// handshake or a read: over TLS its handshake fails at once, in clear a
// connection that sent nothing yet is closed at once (it was held, up to
// N of them, until its first bytes or the header timeout, and a TLS one
// was handshaken before it was counted).
func TestConnectionLimitAppliesAtAccept(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", secure), func(t *testing.T) {
			limits := DefaultHTTPLimits()
			limits.ConnectionsMax = 2
			limits.ReadHeaderTimeout = 5 * time.Minute // a connection held for sorting stays held
			s := startAPIServer(t, "127.0.0.1:0", keysIf(t, secure), false, true, limits)
			put(t, wireClient(t, s.roots), s.base, "w", "1")
			put(t, httpClient(s.roots, false), s.base, "h", "1") // kept alive
			_, addr, _ := strings.Cut(s.base, "://")
			const over = 3
			for i := range over {
				raw, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer raw.Close()
				// Generous: the connection is closed at accept, in
				// milliseconds; held for sorting, it would stay open
				// for ReadHeaderTimeout.
				raw.SetDeadline(time.Now().Add(30 * time.Second))
				if secure {
					tc := tls.Client(raw, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: s.roots, ServerName: "127.0.0.1",
						NextProtos: []string{apiwire.ALPN, "http/1.1"}})
					err = tc.Handshake()
				} else {
					_, err = raw.Read(make([]byte, 1))
				}
				var ne net.Error
				if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
					t.Fatalf("connection %d over the limit: %v, want it closed at accept", i+1, err)
				}
				if open := s.limit.open.Load(); open > int64(limits.ConnectionsMax) {
					t.Fatalf("%d connections counted open, limit %d", open, limits.ConnectionsMax)
				}
			}
			if got := testutil.ToFloat64(s.metrics.connectionsRejected); got != over {
				t.Fatalf("%v connections rejected, want %d", got, over)
			}
		})
	}
}

// In clear with HTTP/2, the API's connections are read through one 4 KiB
// buffer: with wire, the one the listener sorting wire from HTTP read them
// with (h2c beside wire: TestWireServedBesideHTTP), not a second one
// under it; without wire, bufferedListener's.
func TestClearHTTP2ReadsThroughOneBuffer(t *testing.T) {
	for _, wire := range []bool{false, true} {
		l, err := listenHTTP("127.0.0.1:0", nil, true, wire)
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		if _, buffered := l.(bufferedListener); buffered == wire {
			t.Errorf("wire %v: the listener buffers reads: %v, want %v", wire, buffered, !wire)
		}
	}
}

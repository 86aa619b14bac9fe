package apiwire

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// endpoint is a server on loopback that serves echo over HTTP/1.1, and
// over wire too if wire, in clear or over TLS; it counts what it served.
type endpoint struct {
	addr    string
	wire    atomic.Int64 // connections served over wire
	http    atomic.Int64 // connections the http.Server was given
	handled atomic.Int64 // requests that reached the handler
	stop    func()
}

// testCert returns a certificate for 127.0.0.1 and the pool that trusts it.
func testCert(t *testing.T) (*tls.Certificate, *x509.CertPool) {
	ts := httptest.NewTLSServer(http.NotFoundHandler())
	defer ts.Close()
	roots := x509.NewCertPool()
	roots.AddCert(ts.Certificate())
	return &ts.TLS.Certificates[0], roots
}

// startEndpoint serves on addr ("127.0.0.1:0" for a new port), over TLS
// with cert if it is not nil.
func startEndpoint(t *testing.T, addr string, wire bool, cert *tls.Certificate) *endpoint {
	t.Helper()
	inner, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	e := &endpoint{addr: inner.Addr().String()}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.handled.Add(1)
		echo(w, r)
	})
	var l net.Listener = inner
	if cert != nil {
		protos := []string{"http/1.1"}
		if wire {
			protos = []string{ALPN, "http/1.1"}
		}
		l = tls.NewListener(inner, &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: protos})
	}
	srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			e.http.Add(1)
		}
	}}
	var ws *Server
	if wire {
		ws = NewServer(h, ServerConfig{Logger: quiet})
		l = NewListener(l, ListenerConfig{SortTimeout: 10 * time.Second}, func(c net.Conn) {
			e.wire.Add(1)
			ws.ServeConn(c)
		})
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(l)
	}()
	e.stop = func() {
		srv.Close()
		<-served
		if ws != nil {
			// Every wire connection closed, as when a process exits.
			ws.Drain()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ws.Wait(ctx)
		}
	}
	t.Cleanup(e.stop)
	return e
}

// fallbackClient returns a wire client that falls back to HTTP/1.1, and
// how many requests its fallback was given.
func fallbackClient(t *testing.T, roots *x509.CertPool, fallbackFor time.Duration) (*http.Client, *atomic.Int64) {
	var fellBack atomic.Int64
	httpTransport := &http.Transport{}
	fallback := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		fellBack.Add(1)
		return httpTransport.RoundTrip(r)
	})
	tr := NewTransport(TransportConfig{TLS: &tls.Config{RootCAs: roots}, Fallback: fallback, FallbackFor: fallbackFor})
	httpTransport.DialTLSContext = tr.DialFallbackTLS
	t.Cleanup(func() { tr.CloseIdleConnections(); httpTransport.CloseIdleConnections() })
	return &http.Client{Transport: tr}, &fellBack
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// put sends a PUT of value and returns the answer's protocol, or fails
// the test unless echo answered it.
func put(t *testing.T, hc *http.Client, base, path, value string) string {
	t.Helper()
	proto, err := tryPut(hc, base, path, value)
	if err != nil {
		t.Fatal(err)
	}
	return proto
}

func tryPut(hc *http.Client, base, path, value string) (string, error) {
	req, _ := http.NewRequest("PUT", base+path, strings.NewReader(value))
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if want := fmt.Sprintf("PUT %s  auth=\"\" body=%q", path, value); resp.StatusCode != http.StatusCreated || string(body) != want {
		return "", fmt.Errorf("PUT %s: %d %q, want 201 %q", path, resp.StatusCode, clip(string(body)), clip(want))
	}
	return resp.Proto, nil
}

func modes(t *testing.T, run func(t *testing.T, scheme string, cert *tls.Certificate, roots *x509.CertPool)) {
	t.Run("plain", func(t *testing.T) { run(t, "http", nil, nil) })
	t.Run("tls", func(t *testing.T) {
		cert, roots := testCert(t)
		run(t, "https", cert, roots)
	})
}

// A server that does not speak wire is sent the requests over the
// fallback, the first one included, which reached no handler as a wire
// request (in clear the server read the preface as a bad request line
// and nothing after it; over TLS ALPN chose http/1.1, and that connection
// carries HTTP: DialFallbackTLS). The host is remembered: later requests
// go over HTTP at once, without a new probe.
// A body larger than what the server reads before it answers the preface
// (it closes on the rest, resetting the connection) falls back as well.
func TestFallbackToHTTP(t *testing.T) {
	modes(t, func(t *testing.T, scheme string, cert *tls.Certificate, roots *x509.CertPool) {
		e := startEndpoint(t, "127.0.0.1:0", false, cert)
		hc, fellBack := fallbackClient(t, roots, time.Hour)
		base := scheme + "://" + e.addr
		for i := range 3 {
			if proto := put(t, hc, base, fmt.Sprintf("/k%d", i), "value"); proto != "HTTP/1.1" {
				t.Fatalf("request %d answered over %s, want HTTP/1.1", i, proto)
			}
		}
		if got := e.handled.Load(); got != 3 {
			t.Errorf("the handler ran %d times for 3 requests, want 3 (the wire attempt must not reach it)", got)
		}
		if got := fellBack.Load(); got != 3 {
			t.Errorf("the fallback was given %d requests, want 3", got)
		}
		// In clear, one connection was the wire attempt and one carries
		// HTTP/1.1; over TLS, the one that tried wire carries HTTP/1.1.
		if got, want := e.http.Load(), map[bool]int64{false: 2, true: 1}[cert != nil]; got != want {
			t.Errorf("the server was given %d connections, want %d", got, want)
		}
		big := strings.Repeat("b", 1<<20)
		e2 := startEndpoint(t, "127.0.0.1:0", false, cert)
		hc2, _ := fallbackClient(t, roots, time.Hour)
		if proto := put(t, hc2, scheme+"://"+e2.addr, "/big", big); proto != "HTTP/1.1" {
			t.Fatalf("a 1 MiB request answered over %s, want HTTP/1.1", proto)
		}
	})
}

// Without a fallback, a server that does not speak wire fails the request
// with ErrNotWire in clear (over TLS the handshake fails: the client
// offered wire alone), and the request reached no handler.
func TestNotWireWithoutFallback(t *testing.T) {
	modes(t, func(t *testing.T, scheme string, cert *tls.Certificate, roots *x509.CertPool) {
		e := startEndpoint(t, "127.0.0.1:0", false, cert)
		tr := NewTransport(TransportConfig{TLS: &tls.Config{RootCAs: roots}})
		t.Cleanup(tr.CloseIdleConnections)
		_, err := tryPut(&http.Client{Transport: tr}, scheme+"://"+e.addr, "/k", "value")
		if err == nil || (cert == nil && !errors.Is(err, ErrNotWire)) {
			t.Fatalf("a request to an HTTP-only server: %v, want ErrNotWire (or, over TLS, a failed handshake)", err)
		}
		if got := e.handled.Load(); got != 0 {
			t.Fatalf("the handler ran %d times, want 0", got)
		}
	})
}

// A server that speaks wire gets wire from a client with a fallback (over
// TLS, it offers both and the server picks wire).
func TestWireServerGetsWireDespiteTheFallback(t *testing.T) {
	modes(t, func(t *testing.T, scheme string, cert *tls.Certificate, roots *x509.CertPool) {
		e := startEndpoint(t, "127.0.0.1:0", true, cert)
		hc, fellBack := fallbackClient(t, roots, time.Hour)
		for i := range 3 {
			if proto := put(t, hc, scheme+"://"+e.addr, fmt.Sprintf("/k%d", i), "value"); proto != "COORD-WIRE/1" {
				t.Fatalf("request %d answered over %s, want COORD-WIRE/1", i, proto)
			}
		}
		if w, h, f := e.wire.Load(), e.http.Load(), fellBack.Load(); w != 1 || h != 0 || f != 0 {
			t.Fatalf("server: %d wire and %d HTTP connections, %d requests fell back; want 1, 0, 0", w, h, f)
		}
	})
}

// A server restarted on the same address without wire is sent HTTP; once
// FallbackFor has passed, the transport tries wire again, and a server
// restarted with wire gets it back. A request sent as the server stops
// may fail, as over HTTP (the client package retries it).
func TestFallbackFollowsRestarts(t *testing.T) {
	modes(t, func(t *testing.T, scheme string, cert *tls.Certificate, roots *x509.CertPool) {
		e := startEndpoint(t, "127.0.0.1:0", true, cert)
		// Every request after a fallback tries wire again: FallbackFor
		// has always passed.
		hc, _ := fallbackClient(t, roots, time.Nanosecond)
		base := scheme + "://" + e.addr
		for i, wire := range []bool{true, false, true, false} {
			if i > 0 {
				e.stop()
				e = startEndpoint(t, e.addr, wire, cert)
			}
			want := map[bool]string{true: "COORD-WIRE/1", false: "HTTP/1.1"}[wire]
			proto, err := tryPut(hc, base, "/k", "value")
			for try := 0; err != nil && try < 3; try++ {
				// The connection to the stopped server, if the client
				// had not yet seen it close: its draining refused the
				// request, or it closed under it.
				proto, err = tryPut(hc, base, "/k", "value")
			}
			if err != nil || proto != want {
				t.Fatalf("server %d (wire %v): %s %v, want %s", i, wire, proto, err, want)
			}
		}
	})
}

// A plain server that answers the preface as a bad request and resets the
// connection (it closes with the client's bytes unread, as net/http does
// when they outrun its buffer) may make the client's write fail before its
// reader has seen the answer: the answer, still readable, decides, and the
// request fails with ErrNotWire, not with the reset.
func TestPrefaceAnsweredThenResetIsNotWire(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n400 Bad Request")
			c.(*net.TCPConn).SetLinger(0) // a reset, whatever is unread
			c.Close()
		}
	}()
	big := strings.Repeat("b", 1<<20)
	i := 0
	for tries := 0; i < 20 && tries < 200; tries++ {
		tr := NewTransport(TransportConfig{})
		_, err := tryPut(&http.Client{Transport: tr}, "http://"+l.Addr().String(), "/k", big)
		tr.CloseIdleConnections()
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			continue // the reset came before the dial was done: no request was sent
		}
		if !errors.Is(err, ErrNotWire) {
			t.Fatalf("attempt %d: %v, want ErrNotWire", i, err)
		}
		i++
	}
	if i < 20 {
		t.Fatalf("%d of 200 dials were done before the reset, want 20", i)
	}
}

// A request whose context ends while its connection is still being made
// (here a TLS handshake the server never answers) fails as a dial does, a
// *net.OpError of Op "dial" wrapping the context's error: the client
// package then knows that a write was not sent, not that its outcome is
// unknown.
func TestContextEndedDuringTheDialIsADialError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0") // never accepts: the handshake hangs
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tr := NewTransport(TransportConfig{DialTimeout: time.Hour})
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "PUT", "https://"+l.Addr().String()+"/k", strings.NewReader("v"))
	_, err = tr.RoundTrip(req)
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request whose context ended during the dial: %v, want a dial error wrapping the deadline", err)
	}
}

package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coord/client"
	"coord/internal/pki"
)

// http2Server serves a leading fake replica's API as Serve does with
// --http2 set to http2: apiProtocols, and listenHTTP's listener (TLS from
// pki.ServerConfig with offerHTTP2 if secure, buffered reads in clear with
// HTTP/2). It returns the base URL, the TLS roots (nil in clear), and the
// stoppable server.
func http2Server(t *testing.T, secure, http2 bool) (string, *x509.CertPool, *stoppableAPI) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	scheme := "http"
	var roots *x509.CertPool
	if secure {
		dir, ca := nodeFiles(t, "h2", 1)
		src, err := pki.NewSource(pki.Files{Cert: filepath.Join(dir, "n1.crt"), Key: filepath.Join(dir, "n1.key")}, pki.SourceOptions{})
		if err != nil {
			t.Fatal(err)
		}
		roots = x509.NewCertPool()
		roots.AddCert(ca.Cert)
		l = tls.NewListener(l, offerHTTP2(pki.ServerConfig(src, nil), http2))
		scheme = "https"
	} else if http2 {
		l = bufferedListener{l}
	}
	srv := newHTTPServer(NewAPI(newFake(1, 1), APIConfig{}), DefaultHTTPLimits(), quiet, nil)
	srv.Protocols = apiProtocols(http2)
	stoppable := newStoppableAPI(srv)
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return scheme + "://" + l.Addr().String(), roots, stoppable
}

// httpClient returns a client of the API that speaks HTTP/2 if http2 (as
// coord/client's Config.HTTP2 makes it), HTTP/1.1 otherwise.
func httpClient(roots *x509.CertPool, http2 bool) *http.Client {
	tr := &http.Transport{}
	if roots != nil {
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots}
	}
	if http2 {
		tr.Protocols = client.HTTP2Protocols(roots != nil)
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// put PUTs value at key and returns the protocol of the answer.
func put(t *testing.T, hc *http.Client, base, key, value string) int {
	t.Helper()
	req, _ := http.NewRequest("PUT", base+"/v1/kv/"+key, strings.NewReader(value))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", key, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Coord-Leader") != "1" {
		t.Fatalf("PUT %s over HTTP/%d: %d %q, Coord-Leader %q", key, resp.ProtoMajor, resp.StatusCode, body, resp.Header.Get("Coord-Leader"))
	}
	return resp.ProtoMajor
}

// With --http2 the API answers HTTP/2 clients over HTTP/2 and HTTP/1.1
// clients over HTTP/1.1, over TLS (ALPN) and in clear (h2c, buffered
// reads) alike; the answers are the same.
func TestHTTP2ServedBesideHTTP1(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "clear", true: "tls"}[secure], func(t *testing.T) {
			base, roots, _ := http2Server(t, secure, true)
			if got := put(t, httpClient(roots, false), base, "a", "1"); got != 1 {
				t.Errorf("an HTTP/1.1 client was answered over HTTP/%d", got)
			}
			h2 := httpClient(roots, true)
			for i := range 3 { // several requests on the one connection
				if got := put(t, h2, base, "b", strings.Repeat("v", 100*i+1)); got != 2 {
					t.Errorf("an HTTP/2 client was answered over HTTP/%d", got)
				}
			}
		})
	}
}

// Without --http2 the API speaks HTTP/1.1 only, as before: over TLS, a
// client that offers h2 falls back to HTTP/1.1; in clear, a client that
// speaks only h2c is refused (it must not be told --http2 then).
func TestHTTP2OffByDefault(t *testing.T) {
	base, roots, _ := http2Server(t, true, false)
	if got := put(t, httpClient(roots, true), base, "a", "1"); got != 1 {
		t.Errorf("TLS without --http2: answered over HTTP/%d, want 1", got)
	}
	base, _, _ = http2Server(t, false, false)
	req, _ := http.NewRequest("PUT", base+"/v1/kv/a", strings.NewReader("1"))
	resp, err := httpClient(nil, true).Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("h2c without --http2: answered %d over HTTP/%d, want a refused connection", resp.StatusCode, resp.ProtoMajor)
	}
}

// A watch stream works over HTTP/2: each write of the key arrives as an
// event while the stream stays open, beside writes on the same
// connection; and a stopping API ends the stream and returns within its
// bound, as over HTTP/1.1 (shutdown.go).
func TestHTTP2WatchStreamAndShutdown(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "clear", true: "tls"}[secure], func(t *testing.T) {
			base, roots, stoppable := http2Server(t, secure, true)
			hc := httpClient(roots, true)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/watch/kv/w?stream=true", nil)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
				t.Fatalf("stream: %d over HTTP/%d, want 200 over HTTP/2", resp.StatusCode, resp.ProtoMajor)
			}
			events := bufio.NewReader(resp.Body)
			for _, value := range []string{"one", "two"} {
				put(t, hc, base, "w", value)
				if !readEventWith(t, events, value) {
					t.Fatalf("the stream ended before the event of %q", value)
				}
			}
			done := make(chan error, 1)
			go func() { done <- stoppable.shutdown(20 * time.Second) }()
			if _, err := io.Copy(io.Discard, events); err != nil && ctx.Err() != nil {
				t.Fatalf("the stream did not end at shutdown: %v", err)
			}
			if err := <-done; err != nil {
				t.Fatalf("shutdown: %v, want nil (nothing left open)", err)
			}
		})
	}
}

// readEventWith reads the stream's lines until a data line holding
// value (a UTF-8 value travels as it is), or the stream's end.
func readEventWith(t *testing.T, r *bufio.Reader, value string) bool {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if strings.HasPrefix(line, "data:") && strings.Contains(line, `"value":"`+value+`"`) {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// coord/client with Config.HTTP2 writes and reads through a --http2 node
// in clear (h2c with prior knowledge).
func TestClientHTTP2(t *testing.T) {
	base, _, _ := http2Server(t, false, true)
	cfg := client.DefaultConfig(base)
	cfg.WarmInterval, cfg.HTTP2 = 0, true
	cl, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.Put(ctx, "c", []byte("over h2c")); err != nil {
		t.Fatal(err)
	}
	kv, err := cl.Get(ctx, "c")
	if err != nil || string(kv.Value) != "over h2c" {
		t.Fatalf("get: %q, %v", kv.Value, err)
	}
}

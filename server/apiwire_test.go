package server

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"coord/api"
	"coord/apiwire"
	"coord/internal/pki"
)

// wireServer serves a leading fake replica's API as Serve does: HTTP
// (and HTTP/2 if http2) and wire on one listener, TLS if secure, under
// limits. It returns the base URL and the TLS roots (nil in clear).
func wireServer(t *testing.T, secure, http2 bool, limits HTTPLimits) (string, *x509.CertPool) {
	t.Helper()
	var keys *apiKeys
	if secure {
		keys = newAPIKeys(t)
	}
	s := startAPIServer(t, "127.0.0.1:0", keys, http2, true, limits)
	return s.base, s.roots
}

// apiKeys are an API's certificate and the roots that trust it.
type apiKeys struct {
	sec   *Security
	roots *x509.CertPool
}

func newAPIKeys(t testing.TB) *apiKeys {
	dir, ca := nodeFiles(t, "wire", 1)
	src, err := pki.NewSource(pki.Files{Cert: filepath.Join(dir, "n1.crt"), Key: filepath.Join(dir, "n1.key")}, pki.SourceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	return &apiKeys{sec: &Security{HTTP: src}, roots: roots}
}

// apiServer is a leading fake replica's API served as Serve serves it.
type apiServer struct {
	base    string
	roots   *x509.CertPool // nil in clear
	limit   *connLimit
	metrics *Metrics
	stop    func()
}

// startAPIServer serves a leading fake replica's API on addr as Serve
// does: through listenHTTP (over TLS with keys, in clear if nil), with
// HTTP/2 if http2 and wire if wire, under limits.
func startAPIServer(t testing.TB, addr string, keys *apiKeys, http2, wire bool, limits HTTPLimits) *apiServer {
	t.Helper()
	return serveAPI(t, newFake(1, 1), addr, keys, http2, wire, limits)
}

// serveAPI is startAPIServer for replica's API (a node restarted keeps
// its state).
func serveAPI(t testing.TB, replica Replica, addr string, keys *apiKeys, http2, wire bool, limits HTTPLimits) *apiServer {
	t.Helper()
	var sec *Security
	s := &apiServer{base: "http://", metrics: NewMetrics()}
	if keys != nil {
		sec, s.roots, s.base = keys.sec, keys.roots, "https://"
	}
	l, err := listenHTTP(addr, sec, http2, wire)
	if err != nil {
		t.Fatal(err)
	}
	s.base += l.Addr().String()
	var srv *http.Server
	srv, s.limit = newLimitedHTTPServer(NewAPI(replica, APIConfig{}), limits, quiet, s.metrics)
	srv.Protocols = apiProtocols(http2)
	newStoppableAPI(srv)
	var ws *apiwire.Server
	if wire {
		l, ws = listenWire(l, srv, s.limit, limits, Limits{}, quiet)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(l)
	}()
	s.stop = func() {
		srv.Close()
		<-served
		if ws != nil {
			ws.Drain()
		}
	}
	t.Cleanup(s.stop)
	return s
}

func wireClient(t *testing.T, roots *x509.CertPool) *http.Client {
	var conf *tls.Config
	if roots != nil {
		conf = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots}
	}
	tr := apiwire.NewTransport(apiwire.TransportConfig{TLS: conf})
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// One port serves wire beside HTTP/1.1 and HTTP/2, over TLS (ALPN) and in
// clear (the preface); the answers are the same.
func TestWireServedBesideHTTP(t *testing.T) {
	for _, secure := range []bool{false, true} {
		for _, http2 := range []bool{false, true} {
			t.Run(fmt.Sprintf("tls=%v,http2=%v", secure, http2), func(t *testing.T) {
				base, roots := wireServer(t, secure, http2, DefaultHTTPLimits())
				if got := put(t, httpClient(roots, false), base, "a", "1"); got != 1 {
					t.Errorf("an HTTP/1.1 client was answered over HTTP/%d", got)
				}
				if http2 {
					if got := put(t, httpClient(roots, true), base, "a", "2"); got != 2 {
						t.Errorf("an HTTP/2 client was answered over HTTP/%d", got)
					}
				}
				wc := wireClient(t, roots)
				for i := range 3 {
					put(t, wc, base, "w", strings.Repeat("v", 100*i+1))
				}
				resp, err := wc.Get(base + "/v1/kv/w")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.Proto != "COORD-WIRE/1" || resp.StatusCode != 200 || !strings.Contains(string(body), `"revision"`) {
					t.Fatalf("GET over wire: %s %d %s", resp.Proto, resp.StatusCode, body)
				}
				// An error answer travels as it is.
				resp, err = wc.Get(base + "/v1/kv/missing")
				if err != nil {
					t.Fatal(err)
				}
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 404 || !strings.Contains(string(body), "not_found") {
					t.Fatalf("missing key over wire: %d %s", resp.StatusCode, body)
				}
			})
		}
	}
}

// A wire connection counts against --http-max-connections with HTTP's:
// with room for one, a wire connection leaves none for HTTP, and an HTTP
// connection none for wire.
func TestWireCountsAgainstTheConnectionLimit(t *testing.T) {
	limits := DefaultHTTPLimits()
	limits.ConnectionsMax = 1

	base, _ := wireServer(t, false, false, limits)
	put(t, wireClient(t, nil), base, "a", "1") // the connection stays open
	if resp, err := httpClient(nil, false).Get(base + "/v1/kv/a"); err == nil {
		resp.Body.Close()
		t.Fatalf("an HTTP request beside a wire connection at the limit: %d, want the connection closed", resp.StatusCode)
	}

	base, _ = wireServer(t, false, false, limits)
	put(t, httpClient(nil, false), base, "a", "1") // kept alive
	if resp, err := wireClient(t, nil).Get(base + "/v1/kv/a"); err == nil {
		resp.Body.Close()
		t.Fatalf("a wire request beside an HTTP connection at the limit: %d, want the connection closed", resp.StatusCode)
	}
}

// A body over the API's limit gets the API's own answer over wire, as
// over HTTP, not a closed connection: the frame limit leaves room for it.
func TestWireOversizedBodyGetsTheAPIsAnswer(t *testing.T) {
	base, _ := wireServer(t, false, false, DefaultHTTPLimits())
	answer := func(hc *http.Client) (int, string) {
		req, _ := http.NewRequest("PUT", base+"/v1/kv/big", strings.NewReader(strings.Repeat("x", DefaultLimits().ValueBytes+5000)))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	hs, hb := answer(httpClient(nil, false))
	ws, wb := answer(wireClient(t, nil))
	if hs < 400 || hs > 499 || ws != hs || wb != hb {
		t.Fatalf("oversized value: over wire %d %s, over HTTP %d %s; want the same 4xx", ws, wb, hs, hb)
	}
}

// A body that came whole in a wire frame is taken without a copy when it
// fits the route's limit (readBody): at the value limit, at the body limit
// and one byte past it, over wire and over HTTP, the answers are the same,
// and the value read back is the one sent.
func TestWireBodyTakenWhole(t *testing.T) {
	base, _ := wireServer(t, false, false, DefaultHTTPLimits())
	hc, wc := httpClient(nil, false), wireClient(t, nil)
	do := func(hc *http.Client, method, path string, body []byte) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	valueMax, bodyMax := DefaultLimits().ValueBytes, int(bodyBytesMax("kv", DefaultLimits()))
	for _, n := range []int{1, valueMax, bodyMax, bodyMax + 1} {
		value := make([]byte, n)
		for i := range value {
			value[i] = byte('a' + i%26)
		}
		hs, hb := do(hc, "PUT", fmt.Sprintf("/v1/kv/h%d", n), value)
		ws, wb := do(wc, "PUT", fmt.Sprintf("/v1/kv/w%d", n), value)
		if hs != ws || (hs != http.StatusOK && hb != wb) {
			t.Fatalf("%d bytes: over wire %d %s, over HTTP %d %s; want the same answer", n, ws, clipBody(wb), hs, clipBody(hb))
		}
		if (n <= valueMax) != (ws == http.StatusOK) {
			t.Fatalf("%d bytes: %d %s", n, ws, clipBody(wb))
		}
		if ws != http.StatusOK {
			continue
		}
		status, got := do(wc, "GET", fmt.Sprintf("/v1/kv/w%d", n), nil)
		var kv api.KeyResponse
		if err := json.Unmarshal([]byte(got), &kv); status != http.StatusOK || err != nil || kv.Value != string(value) {
			t.Fatalf("%d bytes: read back %d, %v, a value of %d bytes; want the %d sent", n, status, err, len(kv.Value), n)
		}
	}
}

func clipBody(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

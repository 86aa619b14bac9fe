package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"coord/api"
	"coord/apiwire"
)

// directCluster is a leader and a follower API (fake replicas) served
// over wire on loopback, with the direct way in for key requests
// (directKeys) or without it (every request through the http.Handler), and
// over HTTP, where the follower forwards.
type directCluster struct {
	leaderWire, followerWire string // wire addresses
	served                   *atomic.Int64
}

// countingDirect counts the requests directKeys served.
type countingDirect struct {
	*directKeys
	served *atomic.Int64
}

func (c countingDirect) ServeDirect(w http.ResponseWriter, r *apiwire.DirectRequest) bool {
	ok := c.directKeys.ServeDirect(w, r)
	if ok {
		c.served.Add(1)
	}
	return ok
}

// newDirectCluster starts a cluster; with auth, both nodes check tokens
// and secrets (kind -> secret) are made on the leader.
func newDirectCluster(t *testing.T, direct, auth bool, secrets map[string]string) *directCluster {
	t.Helper()
	leader, follower := newFake(1, 1), newFake(2, 1)
	cfg := APIConfig{Auth: auth, Logger: quiet}
	la, fa := NewAPI(leader, cfg), NewAPI(follower, cfg)
	ls, fs := httptest.NewServer(la), httptest.NewServer(fa)
	t.Cleanup(ls.Close)
	t.Cleanup(fs.Close)
	members := []api.Member{
		{ID: 1, HTTP: strings.TrimPrefix(ls.URL, "http://"), Voter: true},
		{ID: 2, HTTP: strings.TrimPrefix(fs.URL, "http://"), Voter: true},
	}
	leader.members, follower.members = members, members
	for _, kind := range slices.Sorted(mapsKeys(secrets)) {
		tok := tokenFor(kind)
		tok.Hash = HashToken(secrets[kind])
		if r, err := leader.Propose(context.Background(), TokenCreateCommand(tok)); err != nil || r.Status != StatusOK {
			t.Fatalf("token %s: %+v %v", kind, r, err)
		}
	}
	c := &directCluster{served: new(atomic.Int64)}
	c.leaderWire = serveWireOnly(t, la, direct, c.served)
	c.followerWire = serveWireOnly(t, fa, direct, c.served)
	return c
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// serveWireOnly serves a over plain wire on a loopback port, with the
// direct way in if direct, and returns the address.
func serveWireOnly(t *testing.T, a *API, direct bool, served *atomic.Int64) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := apiwire.ServerConfig{Limits: wireLimits(Limits{}), Logger: quiet}
	if direct {
		cfg.Direct = countingDirect{directKeys: directFor(a), served: served}
	}
	ws := apiwire.NewServer(a, cfg)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				preface := make([]byte, len(apiwire.Preface))
				if _, err := io.ReadFull(c, preface); err != nil || string(preface) != apiwire.Preface {
					c.Close()
					return
				}
				ws.ServeConn(c)
			}()
		}
	}()
	t.Cleanup(func() { l.Close(); ws.Drain() })
	return l.Addr().String()
}

// directCase is one request of the differential test. direct says
// whether directKeys serves it (the others go through the mux either way,
// and are compared all the same).
type directCase struct {
	name, node, method, target, body string
	header                           map[string][]string
	direct                           bool
}

// directAnswer is what a client reads of an answer: status, every header,
// body; or the error of a request the server did not answer.
type directAnswer struct {
	status int
	header http.Header
	body   []byte
	err    string
}

func (a directAnswer) String() string {
	if a.err != "" {
		return "error: " + a.err
	}
	var names []string
	for name, values := range a.header {
		names = append(names, fmt.Sprintf("%s=%q", name, values))
	}
	slices.Sort(names)
	return fmt.Sprintf("%d %s %q", a.status, strings.Join(names, " "), a.body)
}

// send sends c over a new wire connection (a malformed request closes
// its connection) and reads the answer.
func (c *directCluster) send(t *testing.T, dc directCase) directAnswer {
	t.Helper()
	addr := c.leaderWire
	if dc.node == "follower" {
		addr = c.followerWire
	}
	tr := apiwire.NewTransport(apiwire.TransportConfig{})
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(dc.method, "http://"+addr+"/", strings.NewReader(dc.body))
	if err != nil {
		t.Fatal(err)
	}
	// The target as written, escapes and all.
	req.URL = &url.URL{Scheme: "http", Host: addr, Opaque: strings.Split(dc.target, "?")[0]}
	if _, query, ok := strings.Cut(dc.target, "?"); ok {
		req.URL.RawQuery = query
		req.URL.ForceQuery = query == ""
	}
	for name, values := range dc.header {
		req.Header[name] = values
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		// The same error from either cluster, but for its address.
		return directAnswer{err: strings.ReplaceAll(err.Error(), addr, "ADDR")}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return directAnswer{err: err.Error()}
	}
	return directAnswer{status: resp.StatusCode, header: resp.Header, body: body}
}

// TestDirectKeysMatchHTTP sends a table of key requests, good, malformed,
// oversized, with escaped keys, tokens good, bad and missing, conditions
// that fail, to a follower that forwards, to two clusters alike: one
// whose wire servers serve key requests directly (directKeys), one whose
// wire servers give every request to the http.Handler. Each cluster's
// state follows the same requests, so the answers (status, every header,
// body) must be the same byte for byte, and the requests marked direct
// must have been served so.
func TestDirectKeysMatchHTTP(t *testing.T) {
	for _, auth := range []bool{false, true} {
		t.Run(fmt.Sprintf("auth=%v", auth), func(t *testing.T) {
			secrets := map[string]string{}
			if auth {
				for _, kind := range []string{"read", "write", "write-app", "read-app"} {
					secret, err := NewTokenSecret()
					if err != nil {
						t.Fatal(err)
					}
					secrets[kind] = secret
				}
			}
			direct := newDirectCluster(t, true, auth, secrets)
			viaMux := newDirectCluster(t, false, auth, secrets)
			for _, dc := range directCases(auth, secrets) {
				served := direct.served.Load()
				got, want := direct.send(t, dc), viaMux.send(t, dc)
				if got.String() != want.String() {
					t.Errorf("%s: %s %s to the %s:\n direct %s\n    mux %s", dc.name, dc.method, dc.target, dc.node, got, want)
				}
				if testing.Verbose() {
					t.Logf("%s: %s", dc.name, got)
				}
				if tookDirect := direct.served.Load() > served; tookDirect != dc.direct {
					t.Errorf("%s: served directly %v, want %v (%s)", dc.name, tookDirect, dc.direct, got)
				}
			}
			if viaMux.served.Load() != 0 {
				t.Errorf("the cluster without the direct way in served %d requests directly", viaMux.served.Load())
			}
		})
	}
}

// directCases returns the differential test's requests, in order (they
// write, and later ones read what earlier ones wrote).
func directCases(auth bool, secrets map[string]string) []directCase {
	bearer := func(kind string) map[string][]string {
		switch kind {
		case "":
			return nil
		case "bogus":
			return map[string][]string{"Authorization": {"Bearer coord_" + strings.Repeat("x", 43)}}
		}
		return map[string][]string{"Authorization": {"Bearer " + secrets[kind]}}
	}
	write, read := bearer("write"), bearer("read")
	if !auth {
		write, read = nil, nil
	}
	big := strings.Repeat("v", int(bodyBytesMax("kv_put", DefaultLimits()))+1)
	cases := []directCase{
		{name: "put", node: "leader", method: "PUT", target: "/v1/kv/a", body: "1", header: write, direct: true},
		{name: "put escaped slash", node: "leader", method: "PUT", target: "/v1/kv/app%2Fx", body: "2", header: write, direct: true},
		{name: "put in a session", node: "leader", method: "PUT", target: "/v1/kv/app%2Fs?client_id=7&seq=1&ack=0", body: "3", header: write, direct: true},
		{name: "put in a session again", node: "leader", method: "PUT", target: "/v1/kv/app%2Fs?client_id=7&seq=1&ack=0", body: "3", header: write, direct: true},
		{name: "put stale sequence", node: "leader", method: "PUT", target: "/v1/kv/app%2Fs?client_id=7&seq=1&ack=1", body: "4", header: write, direct: true},
		{name: "seq without client", node: "leader", method: "PUT", target: "/v1/kv/a?seq=1", body: "x", header: write, direct: true},
		{name: "client without seq", node: "leader", method: "PUT", target: "/v1/kv/a?client_id=3", body: "x", header: write, direct: true},
		{name: "bad client_id", node: "leader", method: "PUT", target: "/v1/kv/a?client_id=x&seq=1", body: "x", header: write, direct: true},
		{name: "conditional put that holds", node: "leader", method: "PUT", target: "/v1/kv/a?prev_revision=1", body: "5", header: write, direct: true},
		{name: "conditional put that fails", node: "leader", method: "PUT", target: "/v1/kv/a?prev_revision=1", body: "6", header: write, direct: true},
		{name: "bad prev_revision", node: "leader", method: "PUT", target: "/v1/kv/a?prev_revision=-1", body: "6", header: write, direct: true},
		{name: "create only, exists", node: "leader", method: "PUT", target: "/v1/kv/a?prev_revision=0", body: "6", header: write, direct: true},
		{name: "empty value", node: "leader", method: "PUT", target: "/v1/kv/empty", header: write, direct: true},
		{name: "oversized value", node: "leader", method: "PUT", target: "/v1/kv/big", body: big, header: write, direct: true},
		{name: "value at the limit", node: "leader", method: "PUT", target: "/v1/kv/max", body: big[:DefaultLimits().ValueBytes], header: write, direct: true},
		{name: "value over the machine's limit", node: "leader", method: "PUT", target: "/v1/kv/over", body: big[:DefaultLimits().ValueBytes+1], header: write, direct: true},
		{name: "invalid UTF-8 key", node: "leader", method: "PUT", target: "/v1/kv/%FF", body: "x", header: write, direct: true},
		{name: "UTF-8 key", node: "leader", method: "PUT", target: "/v1/kv/%E2%82%AC", body: "euro", header: write, direct: true},
		{name: "binary value", node: "leader", method: "PUT", target: "/v1/kv/bin", body: "\xff\x00", header: write, direct: true},
		{name: "lower-case escape", node: "leader", method: "PUT", target: "/v1/kv/app%2fl", body: "l", header: write, direct: true},
		{name: "escaped letter", node: "leader", method: "GET", target: "/v1/kv/%61", header: read, direct: true},
		{name: "get", node: "leader", method: "GET", target: "/v1/kv/a", header: read, direct: true},
		{name: "get stale", node: "leader", method: "GET", target: "/v1/kv/a?stale=true", header: read, direct: true},
		{name: "get bad stale", node: "leader", method: "GET", target: "/v1/kv/a?stale=maybe", header: read, direct: true},
		{name: "get missing", node: "leader", method: "GET", target: "/v1/kv/none", header: read, direct: true},
		{name: "get binary", node: "leader", method: "GET", target: "/v1/kv/bin", header: read, direct: true},
		{name: "get escaped", node: "leader", method: "GET", target: "/v1/kv/app%2Fx", header: read, direct: true},
		{name: "get empty query", node: "leader", method: "GET", target: "/v1/kv/a?", header: read, direct: true},
		{name: "get long query", node: "leader", method: "GET", target: "/v1/kv/a?" + strings.Repeat("x=1&", 40) + "stale=true", header: read, direct: true},
		{name: "get with a body", node: "leader", method: "GET", target: "/v1/kv/a", body: "ignored", header: read, direct: true},
		// Taken by the mux either way: it cleans or redirects these, or
		// the direct way does not take their characters.
		{name: "empty key", node: "leader", method: "GET", target: "/v1/kv/", header: read},
		{name: "double slash", node: "leader", method: "GET", target: "/v1/kv/a%2F%2Fb", header: read},
		{name: "dot key", node: "leader", method: "GET", target: "/v1/kv/%2E", header: read},
		{name: "dot dot key", node: "leader", method: "PUT", target: "/v1/kv/%2E%2E", body: "x", header: write},
		{name: "trailing slash", node: "leader", method: "PUT", target: "/v1/kv/a%2F", body: "x", header: write},
		{name: "raw slash", node: "leader", method: "PUT", target: "/v1/kv/app/raw", body: "x", header: write, direct: true},
		{name: "raw slash, get", node: "leader", method: "GET", target: "/v1/kv/app/raw", header: read, direct: true},
		{name: "raw double slash", node: "leader", method: "GET", target: "/v1/kv/app//raw", header: read},
		{name: "raw dot segment", node: "leader", method: "GET", target: "/v1/kv/app/./raw", header: read},
		{name: "raw trailing slash", node: "leader", method: "GET", target: "/v1/kv/app/", header: read},
		{name: "escaped dot segment", node: "leader", method: "GET", target: "/v1/kv/app/%2E%2E/raw", header: read},
		{name: "plus", node: "leader", method: "PUT", target: "/v1/kv/a+b", body: "x", header: write},
		{name: "bad escape", node: "leader", method: "GET", target: "/v1/kv/a%zz", header: read},
		{name: "cut escape", node: "leader", method: "GET", target: "/v1/kv/a%2", header: read},
		{name: "head", node: "leader", method: "HEAD", target: "/v1/kv/a", header: read},
		{name: "delete", node: "leader", method: "DELETE", target: "/v1/kv/empty", header: write},
		{name: "post to a key", node: "leader", method: "POST", target: "/v1/kv/a", body: "x", header: write},
		{name: "other path", node: "leader", method: "GET", target: "/v1/kvx/a", header: read},
		// A follower: linearizable reads and writes forwarded to the
		// leader over HTTP (the fake has no Raft forwarding), stale reads
		// its own.
		{name: "put via the follower", node: "follower", method: "PUT", target: "/v1/kv/f", body: "7", header: write, direct: true},
		{name: "conditional put via the follower fails", node: "follower", method: "PUT", target: "/v1/kv/f?prev_revision=1", body: "8", header: write, direct: true},
		{name: "get via the follower", node: "follower", method: "GET", target: "/v1/kv/f", header: read, direct: true},
		{name: "stale get on the follower", node: "follower", method: "GET", target: "/v1/kv/f?stale=true", header: read, direct: true},
		{name: "get escaped via the follower", node: "follower", method: "GET", target: "/v1/kv/app%2Fx", header: read, direct: true},
		{name: "a forwarded request on a follower", node: "follower", method: "PUT", target: "/v1/kv/f", body: "9",
			header: merge(write, map[string][]string{"Coord-Forwarded": {"1"}}), direct: true},
	}
	if !auth {
		return cases
	}
	return append(cases, []directCase{
		{name: "put without a token", node: "leader", method: "PUT", target: "/v1/kv/a", body: "x", direct: true},
		{name: "get without a token", node: "leader", method: "GET", target: "/v1/kv/a", direct: true},
		{name: "put with an unknown token", node: "leader", method: "PUT", target: "/v1/kv/a", body: "x", header: bearer("bogus"), direct: true},
		{name: "get with an unknown token", node: "leader", method: "GET", target: "/v1/kv/a", header: bearer("bogus"), direct: true},
		{name: "put with a read token", node: "leader", method: "PUT", target: "/v1/kv/a", body: "x", header: read, direct: true},
		{name: "put outside the token's prefix", node: "leader", method: "PUT", target: "/v1/kv/a", body: "x", header: bearer("write-app"), direct: true},
		{name: "put inside the token's prefix", node: "leader", method: "PUT", target: "/v1/kv/app%2Fy", body: "x", header: bearer("write-app"), direct: true},
		{name: "get outside the token's prefix", node: "leader", method: "GET", target: "/v1/kv/a", header: bearer("read-app"), direct: true},
		{name: "stale get outside the token's prefix", node: "leader", method: "GET", target: "/v1/kv/a?stale=true", header: bearer("read-app"), direct: true},
		{name: "get inside the token's prefix", node: "leader", method: "GET", target: "/v1/kv/app%2Fy", header: bearer("read-app"), direct: true},
		{name: "not Bearer", node: "leader", method: "GET", target: "/v1/kv/a", header: map[string][]string{"Authorization": {"Basic " + secrets["read"]}}, direct: true},
		{name: "Bearer without a token", node: "leader", method: "GET", target: "/v1/kv/a", header: map[string][]string{"Authorization": {"Bearer  "}}, direct: true},
		{name: "bearer in lower case", node: "leader", method: "GET", target: "/v1/kv/a", header: map[string][]string{"Authorization": {"bearer " + secrets["read"]}}, direct: true},
		{name: "header name in lower case", node: "leader", method: "GET", target: "/v1/kv/a", header: map[string][]string{"authorization": {"Bearer " + secrets["read"]}}, direct: true},
		{name: "two tokens, the first a bad one", node: "leader", method: "GET", target: "/v1/kv/a", header: map[string][]string{"Authorization": {"Bearer bad", "Bearer " + secrets["read"]}}, direct: true},
		{name: "two tokens, the first a good one", node: "leader", method: "GET", target: "/v1/kv/a", header: map[string][]string{"Authorization": {"Bearer " + secrets["read"], "Bearer bad"}}, direct: true},
		{name: "oversized value without a token", node: "leader", method: "PUT", target: "/v1/kv/big", body: big, direct: true},
		{name: "put via the follower without a token", node: "follower", method: "PUT", target: "/v1/kv/f", body: "x", direct: true},
		{name: "put via the follower with a token it does not know", node: "follower", method: "PUT", target: "/v1/kv/f", body: "x", header: write, direct: true},
		{name: "get via the follower with a token it does not know", node: "follower", method: "GET", target: "/v1/kv/f", header: read, direct: true},
		{name: "put via the follower with an unknown token", node: "follower", method: "PUT", target: "/v1/kv/f", body: "x", header: bearer("bogus"), direct: true},
	}...)
}

func merge(a, b map[string][]string) map[string][]string {
	m := map[string][]string{}
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
}

// FuzzDirectKey checks directKey against the mux it stands in for: a
// target that a request frame may carry and that it takes parses (url.ParseRequestURI), gives itself back as its
// RequestURI (what a follower forwards), and is routed by a mux with the
// key routes' pattern to that pattern, unredirected, with the same key and
// query.
func FuzzDirectKey(f *testing.F) {
	for _, target := range []string{"/v1/kv/a", "/v1/kv/app%2Fx?client_id=1&seq=2", "/v1/kv/%2E", "/v1/kv/a%2F%2Fb",
		"/v1/kv/%E2%82%AC?", "/v1/kv/a%2F", "/v1/kv/%2E%2E%2Fa", "/v1/kv/a/b", "/v1/kv/a//b", "/v1/kv/a/./b", "/v1/kv/a%2F.%2Fb", "/v1/kv/%zz", "/v1/kv/a?b#c"} {
		f.Add(target)
	}
	var gotKey, gotPattern string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/kv/{key...}", func(w http.ResponseWriter, r *http.Request) {
		gotKey, gotPattern = r.PathValue("key"), r.Pattern
	})
	f.Fuzz(func(t *testing.T, target string) {
		if _, err := apiwire.NewDirectRequest(context.Background(), "GET", target, nil, nil, apiwire.DefaultLimits()); err != nil {
			return // the frame's decoder refuses it before Accepts sees it
		}
		key, query, ok := directKey(target)
		if !ok {
			return
		}
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatalf("directKey took %q, which does not parse: %v", target, err)
		}
		if u.RequestURI() != target {
			t.Fatalf("directKey took %q, whose RequestURI is %q", target, u.RequestURI())
		}
		if u.RawQuery != query {
			t.Fatalf("%q: query %q, the URL's %q", target, query, u.RawQuery)
		}
		gotKey, gotPattern = "", ""
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, &http.Request{Method: "GET", URL: u, RequestURI: target, Header: http.Header{}, Host: "x"})
		if rec.Code != 200 || gotPattern == "" || gotKey != key {
			t.Fatalf("%q: directKey's key %q; the mux answered %d, pattern %q, key %q", target, key, rec.Code, gotPattern, gotKey)
		}
	})
}

// Once a hand-over has begun, directKeys gives every request back, with
// nothing written: handedOver holds or refuses them.
func TestDirectKeysGiveBackDuringAHandOver(t *testing.T) {
	a := NewAPI(newFake(1, 1), APIConfig{Logger: quiet})
	drain := newHandedOver(a, nil)
	d := directFor(drain)
	if d == nil || d.drain != drain || d.api != a {
		t.Fatalf("directFor(handedOver) = %+v", d)
	}
	drain.begin()
	for _, method := range []string{"GET", "PUT"} {
		rec := httptest.NewRecorder()
		if d.ServeDirect(rec, newDirectRequest(method, "/v1/kv/a")) {
			t.Errorf("%s served directly during a hand-over", method)
		}
		if rec.Code != 200 || len(rec.Header()) != 0 || rec.Body.Len() != 0 {
			t.Errorf("%s given back after writing %d %v %q", method, rec.Code, rec.Header(), rec.Body)
		}
	}
	if directFor(http.NotFoundHandler()) != nil {
		t.Error("a direct way in to a handler that is not the API")
	}
}

func newDirectRequest(method, target string) *apiwire.DirectRequest {
	r, err := apiwire.NewDirectRequest(context.Background(), method, target, nil, nil, apiwire.DefaultLimits())
	if err != nil {
		panic(err)
	}
	return r
}

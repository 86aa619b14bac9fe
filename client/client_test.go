package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// deadEndpoint returns a loopback address nothing listens on.
func deadEndpoint(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestRetriesKeepTheSequenceNumber checks the client side of exactly-once:
// a write retried after a dead node and a 503 carries the same client id
// and sequence number every time, and the next write acknowledges it.
func TestRetriesKeepTheSequenceNumber(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		q := r.URL.Query()
		seen = append(seen, fmt.Sprintf("%s/%s/%s", q.Get("client_id"), q.Get("seq"), q.Get("ack")))
		calls++
		w.Header().Set("Content-Type", "application/json")
		if calls == 1 {
			w.WriteHeader(503)
			fmt.Fprint(w, `{"error":"no leader","code":"unavailable"}`)
			return
		}
		fmt.Fprint(w, `{"revision":7}`)
	}))
	defer srv.Close()
	cfg := DefaultConfig(deadEndpoint(t), strings.TrimPrefix(srv.URL, "http://"))
	cfg.WarmInterval = 0 // the server counts every request
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rev, err := c.Put(ctx, "k", []byte("v"))
	if err != nil || rev != 7 {
		t.Fatalf("put: %d %v", rev, err)
	}
	if _, err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprint(c.ID())
	want := []string{id + "/1/0", id + "/1/0", id + "/2/1"}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("requests %v, want %v", seen, want)
	}
}

func TestAnswersBecomeTypedErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(409)
		fmt.Fprint(w, `{"error":"revision mismatch","code":"conflict","revision":12}`)
	}))
	defer srv.Close()
	c, err := New(DefaultConfig(strings.TrimPrefix(srv.URL, "http://")))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.PutIf(context.Background(), "k", nil, 3)
	var e *Error
	if !errors.Is(err, ErrConflict) || !errors.As(err, &e) || e.Revision != 12 {
		t.Fatalf("err %v, want a conflict at revision 12", err)
	}
}

// A write that never reached a node (connections refused) was provably not
// applied: unavailable, not unknown. Reads are never unknown.
func TestUnreachableClusterIsUnavailable(t *testing.T) {
	c, err := New(DefaultConfig(deadEndpoint(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Put(ctx, "k", nil)
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrUnknown) {
		t.Fatalf("write: %v, want unavailable, and not unknown: nothing was sent", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	_, err = c.Get(ctx2, "k")
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrUnknown) {
		t.Fatalf("read: %v, want unavailable only", err)
	}
}

// The outcome of a write is unknown as soon as one attempt may have reached
// a leader: the API said so (unknown_outcome), or the node took the request
// and never answered. Answers that say "not applied" (unavailable,
// disk_full) keep it known.
func TestWriteOutcomeUnknownOnlyIfAnAttemptMayHaveApplied(t *testing.T) {
	answer := func(status int, code string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":"x","code":%q}`, code)
		}
	}
	hang := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	tests := []struct {
		name    string
		handler http.Handler
		unknown bool
		also    error
	}{
		{"unavailable", answer(503, "unavailable"), false, nil},
		{"disk full", answer(507, "disk_full"), false, ErrDiskFull},
		{"unknown outcome", answer(503, "unknown_outcome"), true, nil},
		{"no answer", hang, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			// One attempt per write: the back-off after it outlasts the
			// context, so the context never cuts an attempt that the server
			// would have answered (a loaded machine may take long to answer,
			// and a cut attempt may have applied). Only the hanging server's
			// attempt ends at AttemptTimeout.
			cfg := DefaultConfig(strings.TrimPrefix(srv.URL, "http://"))
			cfg.AttemptTimeout = 3 * time.Second
			cfg.BackoffMin, cfg.BackoffMax = time.Minute, time.Minute
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = c.Put(ctx, "k", nil)
			if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrUnknown) != tt.unknown {
				t.Fatalf("write: %v, want unavailable, unknown=%v", err, tt.unknown)
			}
			if tt.also != nil && !errors.Is(err, tt.also) {
				t.Fatalf("write: %v, want it to match %v", err, tt.also)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, cfg := range []Config{
		{},
		DefaultConfig("ftp://x:1"),
		DefaultConfig("http://x:1/v1"),
		DefaultConfig("https://"),
		DefaultConfig("u@x:1"),
		{Endpoints: []string{"a:1"}, AttemptTimeout: 0, BackoffMin: 1, BackoffMax: 1},
		{Endpoints: []string{"a:1"}, AttemptTimeout: 1, BackoffMin: 2, BackoffMax: 1},
		{Endpoints: []string{"a:1"}, AttemptTimeout: 1, BackoffMin: 1, BackoffMax: 1, WireFallbackFor: -time.Second},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: err %v, want ErrInvalid", cfg, err)
		}
	}
}

// TestTLSAndToken: over HTTPS, the client verifies the server with the CA
// it is given, sends its token, and types the refusals.
func TestTLSAndToken(t *testing.T) {
	var auth atomic.Value
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/kv/denied":
			w.WriteHeader(403)
			fmt.Fprint(w, `{"error":"token 3 has role read","code":"permission_denied"}`)
		case "/v1/kv/anon":
			w.WriteHeader(401)
			fmt.Fprint(w, `{"error":"no token","code":"unauthenticated"}`)
		default:
			fmt.Fprint(w, `{"revision":5}`)
		}
	}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	hostport := strings.TrimPrefix(srv.URL, "https://")
	for _, ep := range []string{hostport, srv.URL} {
		cfg := DefaultConfig(ep)
		cfg.TLS = &tls.Config{RootCAs: roots}
		cfg.Token = "coord_secret"
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if rev, err := c.Put(ctx, "k", []byte("v")); err != nil || rev != 5 {
			t.Fatalf("%s: put %d %v", ep, rev, err)
		}
		if got := auth.Load(); got != "Bearer coord_secret" {
			t.Fatalf("Authorization %q", got)
		}
		if _, err := c.Put(ctx, "denied", nil); !errors.Is(err, ErrPermissionDenied) {
			t.Fatalf("403: %v", err)
		}
		if _, err := c.Get(ctx, "anon"); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("401: %v", err)
		}
		cancel()
	}
	// Without the CA, the server's certificate is refused. The attempt may
	// take as long as the context allows: a loaded machine took more than
	// the default 2 s to fail the handshake.
	cfg := DefaultConfig(srv.URL)
	cfg.AttemptTimeout = 30 * time.Second
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// One attempt (Status does not retry), so the TLS error itself comes back.
	if _, err := c.Status(ctx, srv.URL); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("unknown CA: %v", err)
	}
}

// TestForgottenSessionStartsANewOne: a cluster that answers stale_sequence
// (it evicted the session) leaves the write's fate unknown, and the client
// moves to a new session for the next writes.
func TestForgottenSessionStartsANewOne(t *testing.T) {
	var mu sync.Mutex
	var ids []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, r.URL.Query().Get("client_id")+"/"+r.URL.Query().Get("seq"))
		w.Header().Set("Content-Type", "application/json")
		if len(ids) == 1 {
			w.WriteHeader(409)
			fmt.Fprint(w, `{"error":"session unknown (evicted?)","code":"stale_sequence"}`)
			return
		}
		fmt.Fprint(w, `{"revision":3}`)
	}))
	defer srv.Close()
	cfg := DefaultConfig(strings.TrimPrefix(srv.URL, "http://"))
	cfg.WarmInterval = 0 // the server's first request must be the write
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	first := c.ID()
	_, err = c.Put(context.Background(), "k", nil)
	if !errors.Is(err, ErrStaleSequence) || !errors.Is(err, ErrUnknown) {
		t.Fatalf("err %v, want stale sequence and unknown outcome", err)
	}
	if _, err := c.Put(context.Background(), "k", nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if c.ID() == first || ids[1] != fmt.Sprint(c.ID())+"/1" {
		t.Fatalf("requests %v: the second write is not seq 1 of a new session (old id %d)", ids, first)
	}
}

// TestFindsTheLeader: a client that reached the cluster through a follower
// learns the leader's address and goes straight to it afterwards.
func TestFindsTheLeader(t *testing.T) {
	var leaderHits atomic.Int64
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaderHits.Add(1)
		w.Header().Set("Coord-Node", "1")
		w.Header().Set("Coord-Leader", "1")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"revision":5}`)
	}))
	defer leader.Close()
	leaderAddr := strings.TrimPrefix(leader.URL, "http://")
	follower := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Coord-Node", "2")
		w.Header().Set("Coord-Leader", "1")
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/status" {
			fmt.Fprintf(w, `{"id":2,"leader":1,"members":[{"id":1,"http":%q,"voter":true},{"id":2,"voter":true}]}`, leaderAddr)
			return
		}
		fmt.Fprint(w, `{"revision":5}`) // as if forwarded
	}))
	defer follower.Close()
	c, err := New(DefaultConfig(strings.TrimPrefix(follower.URL, "http://"), leaderAddr))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for leaderHits.Load() == 0 && time.Now().Before(deadline) {
		if _, err := c.Put(context.Background(), "k", nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // the lookup runs in the background
	}
	if leaderHits.Load() == 0 {
		t.Fatal("the client never went to the leader directly")
	}
}

// TestLearnedLeaderSticks: a client writing in a closed loop has a write
// in flight to the follower when its lookup of the leader returns; the
// answer of that write must not send the client back to the follower. The
// client has no warm-up here, which would learn the leader before the
// first write (TestWarmUpFindsTheLeader).
func TestLearnedLeaderSticks(t *testing.T) {
	var leaderPuts, followerPuts atomic.Int64
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Coord-Node", "1")
		w.Header().Set("Coord-Leader", "1")
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/status" {
			fmt.Fprint(w, `{"id":1,"leader":1}`)
			return
		}
		leaderPuts.Add(1)
		fmt.Fprint(w, `{"revision":5}`)
	}))
	defer leader.Close()
	leaderAddr := strings.TrimPrefix(leader.URL, "http://")
	var cp atomic.Pointer[Client]
	second := make(chan struct{}) // closed when the second write reaches the follower
	follower := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Coord-Node", "2")
		w.Header().Set("Coord-Leader", "1")
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/status" {
			// The lookup's answer comes while the second write is in
			// flight, as the test means: were it to come first, the second
			// write would go to the leader, and the test check nothing.
			select {
			case <-second:
			case <-r.Context().Done():
				return
			}
			fmt.Fprintf(w, `{"id":2,"leader":1,"members":[{"id":1,"http":%q,"voter":true},{"id":2,"voter":true}]}`, leaderAddr)
			return
		}
		if followerPuts.Add(1) == 2 {
			close(second)
			// The write after the one that started the lookup: answer it
			// only once the client has taken the lookup's answer in (it
			// prefers the leader, endpoint 1), as a slower forward would.
			deadline := time.Now().Add(20 * time.Second)
			for c := cp.Load(); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				c.mu.Lock()
				learned := c.preferred == 1
				c.mu.Unlock()
				if learned {
					break
				}
			}
		}
		fmt.Fprint(w, `{"revision":5}`) // as if forwarded
	}))
	defer follower.Close()
	cfg := DefaultConfig(strings.TrimPrefix(follower.URL, "http://"), leaderAddr)
	cfg.WarmInterval = 0
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cp.Store(c)
	for i := 0; i < 3; i++ {
		if _, err := c.Put(context.Background(), "k", nil); err != nil {
			t.Fatal(err)
		}
	}
	if leaderPuts.Load() != 1 {
		t.Fatalf("the third write went to the follower (writes at the leader: %d): the answer in flight undid the lookup", leaderPuts.Load())
	}
}

// TestGiveUpReportsTheLastAttemptThatEndedOnItsOwn: a call's context ends
// during an attempt (here a TLS handshake a server never answers), after
// another failed on its own (a certificate the client does not trust).
// The error names the certificate, not only the deadline that cut the
// last attempt short.
func TestGiveUpReportsTheLastAttemptThatEndedOnItsOwn(t *testing.T) {
	untrusted := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer untrusted.Close()
	// Accepts connections and says nothing: every handshake waits for the
	// caller's deadline.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	cfg := DefaultConfig(untrusted.URL, "https://"+silent.Addr().String())
	cfg.TLS = &tls.Config{RootCAs: x509.NewCertPool()}
	cfg.AttemptTimeout = time.Minute // the call's own deadline cuts the silent one short
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = c.Get(ctx, "k")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Get: %v, want ErrUnavailable naming the certificate", err)
	}
}

package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"coord/api"
	"coord/apiwire"
)

// Errors. A failure the cluster answered is an *Error, which matches one of
// these with errors.Is.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("client: not found")
	// ErrConflict: a compare-and-swap found another revision.
	ErrConflict = errors.New("client: revision conflict")
	// ErrHeld: the lease is held by someone else.
	ErrHeld = errors.New("client: lease held")
	// ErrLost: the token is no longer the lease's current one.
	ErrLost = errors.New("client: lease lost")
	// ErrInvalid: the request was refused as malformed, or the arguments
	// were bad before it was sent.
	ErrInvalid = errors.New("client: invalid request")
	// ErrUnavailable: no node could serve the request before the context
	// ended. For a write, ErrUnknown too if any attempt may have reached a
	// leader's log; without ErrUnknown, no attempt was applied.
	ErrUnavailable = errors.New("client: cluster unavailable")
	// ErrUnknown: a write may or may not have been applied.
	ErrUnknown = errors.New("client: outcome unknown")
	// ErrDiskFull: the node's disk is full; it takes no writes until
	// space returns. The write was not applied by that attempt.
	ErrDiskFull = errors.New("client: disk full")
	// ErrStaleSequence: the cluster refused a retry it can no longer
	// answer (its session was forgotten); the write was not applied by
	// this attempt.
	ErrStaleSequence = errors.New("client: stale sequence")
	// ErrUnauthenticated: the cluster checks tokens, and the client sent
	// none or one it does not know (revoked, or of another cluster).
	ErrUnauthenticated = errors.New("client: unauthenticated")
	// ErrPermissionDenied: the token's role or prefix does not allow the
	// request.
	ErrPermissionDenied = errors.New("client: permission denied")
)

// Error is a failure the cluster answered.
type Error struct {
	// Status is the HTTP status; Code the API's error code ("conflict").
	Status int
	Code   api.Code
	// Message is the server's explanation.
	Message string
	// Revision is the current revision on a conflict.
	Revision uint64
	// Holder and Token describe the current lease on ErrHeld and ErrLost.
	Holder string
	Token  uint64
	// Key is the key of the operation that failed a Batch (and the key a
	// read found missing).
	Key string
}

// Error returns the server's explanation with the status and code.
func (e *Error) Error() string {
	return fmt.Sprintf("client: %s (%d %s)", e.Message, e.Status, e.Code)
}

// Is matches the sentinel of the error's code.
func (e *Error) Is(target error) bool {
	return codeErrors[e.Code] == target
}

var codeErrors = map[api.Code]error{
	api.CodeNotFound: ErrNotFound, api.CodeConflict: ErrConflict, api.CodeHeld: ErrHeld, api.CodeLost: ErrLost,
	api.CodeInvalid: ErrInvalid, api.CodeStaleSequence: ErrStaleSequence,
	api.CodeUnauthenticated: ErrUnauthenticated, api.CodePermissionDenied: ErrPermissionDenied,
	api.CodeUnavailable: ErrUnavailable, api.CodeUnknownOutcome: ErrUnknown, api.CodeTimeout: ErrUnknown,
	api.CodeDiskFull: ErrDiskFull, api.CodeStorageFailed: ErrUnavailable,
}

// mayHaveApplied reports whether a failed attempt of a write may have
// reached a leader's log: the API said unknown_outcome (or timeout), or the
// connection failed after it was made (the request may have been read).
// Everything else the API answers (unavailable, disk_full, ...), a
// connection that could not be made, a request the multiplexed
// connection refused before serving it (apiwire.ErrRefused), and one that
// never left the client because it waited in vain for a free stream on
// that connection (apiwire.ErrNotSent) mean not applied.
func mayHaveApplied(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Code == api.CodeUnknownOutcome || e.Code == api.CodeTimeout
	}
	if errors.Is(err, apiwire.ErrRefused) || errors.Is(err, apiwire.ErrNotSent) {
		return false
	}
	var op *net.OpError
	return !(errors.As(err, &op) && op.Op == "dial")
}

// Config configures a Client.
type Config struct {
	// Endpoints are the addresses of cluster nodes' APIs, at least one:
	// host:port, or https://host:port or http://host:port. Without a
	// scheme, an endpoint is https when TLS is set, http otherwise.
	Endpoints []string
	// TLS, if set, is the configuration of HTTPS connections: the CA to
	// verify the nodes' certificates with (RootCAs), and a client
	// certificate for clusters that require one. Nil: plain HTTP, for
	// clusters run with --insecure (an https:// endpoint then uses the
	// system's roots).
	TLS *tls.Config
	// Token, if set, is sent with every request as a bearer token: a
	// secure cluster refuses requests without one (ErrUnauthenticated).
	Token string
	// AttemptTimeout is how long an attempt against one node may go
	// unanswered before the client checks that the node is still there, so
	// that a paused, partitioned or unreachable node does not hold a
	// request for its whole context. Past it, an attempt at a node that
	// answered another request of the client in the last AttemptTimeout
	// is awaited; else one not yet written is abandoned, and a written one
	// is abandoned unless the node answers its readiness probe (GET
	// /readyz) within half of it. A node that does is slow, not gone, and
	// its answer is awaited (checked again every AttemptTimeout) up to the
	// caller's deadline.
	AttemptTimeout time.Duration
	// BackoffMin and BackoffMax bound the wait between rounds of attempts
	// (a round tries every endpoint once, a leader's first). The wait
	// starts at BackoffMin, doubles each round up to BackoffMax, and is
	// drawn at random from its upper half so that clients that failed
	// together do not retry in step.
	BackoffMin, BackoffMax time.Duration
	// WarmInterval is how often, while the client is in use, it sends a
	// cheap request (GET /healthz) to every endpoint, so that it holds an
	// open (for HTTPS, already handshaken) connection to each and knows
	// which node answers at each address: when the leader fails, the next
	// attempt goes to a node the client already knows, over a connection
	// already made. Keep it below the HTTP client's idle-connection timeout
	// (30 s for the client's own) and the nodes' (--http-idle-timeout, 2
	// minutes). 0: no warm-up; connections are made when needed (a
	// program that makes one request and ends should say so: the warm-up
	// starts with the first request).
	WarmInterval time.Duration
	// HTTPClient sends the requests. Nil: a client of its own.
	HTTPClient *http.Client
	// HTTP2 makes the client's own HTTP client (when HTTPClient is nil)
	// speak HTTP/2, its requests sharing one connection per node: over
	// TLS it offers "h2" in ALPN and falls back to HTTP/1.1 with a node
	// that does not; in plain mode (TLS nil) it speaks h2c with prior
	// knowledge, which only nodes run with --http2 understand. It takes
	// precedence over the multiplexed connection (NoWire).
	HTTP2 bool
	// NoWire makes the client's own HTTP client (when HTTPClient is nil)
	// speak HTTP/1.1 only. By default it sends its requests over coord's
	// multiplexed connection (package apiwire, docs/API.md): one
	// connection per node carries every request in flight, over TLS by
	// ALPN "coord-wire/1" or, in plain mode, a preface. A node that does
	// not speak it (run with --wire=false, or older than it) is sent its
	// requests over HTTP/1.1 instead, found out on the first connection
	// to it: over TLS the client offers "http/1.1" as well, the node
	// chooses, and a connection that chose HTTP/1.1 carries it; in plain
	// mode the node answers the preface as a bad HTTP request, which is
	// sent nothing else and serves nothing, and the requests meant for
	// that connection go over a new HTTP/1.1 connection. The client
	// remembers such a node for a minute, then tries the multiplexed
	// connection again (a node restarted with wire gets it back):
	// WireFallbackFor says how long.
	// Everything above the transport (leader following, retries,
	// sessions, watches) works alike, but a wire connection carries at
	// most 1,024 requests at once (apiwire.Limits.StreamsMax): past that,
	// where HTTP/1.1 would open another connection, a request waits for a
	// slot, so a program that holds that many long polls or streams on one
	// node should set NoWire, or use a client of its own for them. A
	// request whose attempt ends while it waits was not sent: it is tried
	// again, and a write that fails so is not of unknown outcome.
	NoWire bool
	// WireFallbackFor is how long the client's own HTTP client (unless
	// NoWire or HTTP2) sends a node found not to speak the multiplexed
	// connection its requests over HTTP/1.1 before a new connection tries
	// it again. Each try costs a new connection (in plain mode one the
	// node answers with 400 Bad Request); a shorter time finds a node
	// restarted with wire sooner. 0: a minute, the default.
	WireFallbackFor time.Duration
	// Spread sends the requests any member serves itself to the
	// endpoints in turn (round robin), instead of to the leader: writes
	// of keys, batches, acquires and releases of leases (a follower
	// forwards them to the leader as Raft proposals, batched with its
	// other clients'), reads of keys (a follower serves a linearizable
	// one by ReadIndex, a stale one from its own state), stale reads of
	// leases, and watches of keys. An endpoint that failed to answer in
	// the last second is skipped, and an answer naming the leader
	// (Coord-Leader) does not move these requests to it. The rest still
	// go to the leader the client follows: renewals of leases, lease
	// sessions, linearizable reads and watches of leases (their
	// remaining time is the leader's clock), tokens and membership
	// changes, which a follower would only forward over HTTP.
	//
	// The trade-off: a write through a follower takes one more hop (its
	// answer comes when the follower has applied it, about one round
	// trip between members later), while the work of serving clients
	// (reading requests, running handlers, writing answers: on a loaded
	// leader more than half of its CPU) is shared by every member
	// instead of all done by the leader. It is what etcd's client does
	// with the endpoints it is given. Retries keep their rules: a write
	// whose attempt failed is retried under the same session and
	// sequence number, at the leader first, so it applies at most once
	// whichever member took it; while no leader is known, members refuse
	// writes and linearizable reads (unavailable) and the client tries
	// the others and backs off as usual. False (the default): every
	// request goes to the leader.
	Spread bool
}

// DefaultConfig returns a Config for the given endpoints.
func DefaultConfig(endpoints ...string) Config {
	return Config{
		Endpoints:       endpoints,
		AttemptTimeout:  2 * time.Second,
		BackoffMin:      2 * time.Millisecond,
		BackoffMax:      200 * time.Millisecond,
		WarmInterval:    10 * time.Second,
		WireFallbackFor: time.Minute,
	}
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	switch {
	case len(c.Endpoints) == 0:
		return fmt.Errorf("%w: no endpoints", ErrInvalid)
	case c.AttemptTimeout <= 0:
		return fmt.Errorf("%w: AttemptTimeout %v must be positive", ErrInvalid, c.AttemptTimeout)
	case c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin:
		return fmt.Errorf("%w: BackoffMin %v and BackoffMax %v: want 0 < min <= max", ErrInvalid, c.BackoffMin, c.BackoffMax)
	case c.WarmInterval < 0:
		return fmt.Errorf("%w: WarmInterval %v is negative", ErrInvalid, c.WarmInterval)
	case c.WireFallbackFor < 0:
		return fmt.Errorf("%w: WireFallbackFor %v is negative", ErrInvalid, c.WireFallbackFor)
	}
	for i, e := range c.Endpoints {
		if _, err := c.baseURL(e); err != nil {
			return fmt.Errorf("%w: Endpoints[%d]: %v", ErrInvalid, i, err)
		}
	}
	if strings.ContainsAny(c.Token, " \r\n") {
		return fmt.Errorf("%w: Token holds spaces or line breaks", ErrInvalid)
	}
	return nil
}

// baseURL returns the scheme and address of an endpoint: "https://host:port".
func (c Config) baseURL(endpoint string) (string, error) {
	scheme := "http"
	if c.TLS != nil {
		scheme = "https"
	}
	hostport := endpoint
	if s, rest, ok := strings.Cut(endpoint, "://"); ok {
		if s != "http" && s != "https" {
			return "", fmt.Errorf("endpoint %q: scheme %q, want http or https", endpoint, s)
		}
		scheme, hostport = s, rest
	}
	if hostport == "" || strings.ContainsAny(hostport, "/?#@") {
		return "", fmt.Errorf("endpoint %q: want host:port, https://host:port or http://host:port", endpoint)
	}
	return scheme + "://" + hostport, nil
}

// hostPort returns an endpoint without its scheme.
func hostPort(endpoint string) string {
	if _, rest, ok := strings.Cut(endpoint, "://"); ok {
		return rest
	}
	return endpoint
}

// Client talks to a coord cluster.
//
// Client is safe for concurrent use; concurrent writes share one session.
type Client struct {
	cfg  Config
	http *http.Client
	id   uint64
	// index maps each endpoint, as configured, to its position.
	index map[string]int

	mu        sync.Mutex
	preferred int // index of the endpoint to try first: the leader, if known
	leaderAt  int // index of the endpoint of the leader the last answer named; -1: none known
	nextSeq   uint64
	pending   map[uint64]bool
	// nodes[i] is the node ID endpoint i last answered as (its Coord-Node
	// header), 0 if unknown: it turns a Coord-Leader hint into an address.
	nodes []uint64
	// downUntil[i]: endpoint i failed to answer at all (refused, reset,
	// timed out); until then a hint naming it is not followed, and a
	// round tries it last.
	downUntil []time.Time
	learning  bool         // a lookup of the leader's address is in flight
	learnedAt time.Time    // when the last one started
	ready     []*readiness // ready[i]: the last readiness probe of endpoint i
	// answeredAt[i]: when endpoint i last answered a request with an
	// answer that came through a leader (call.reachesLeader): it is
	// making progress.
	answeredAt []time.Time
	warming    bool      // a warm-up is in flight
	warmedAt   time.Time // when the last one started
	// turn is the endpoint the next call that spreads (Config.Spread,
	// call.spreads) starts at, unless it failed to answer lately.
	turn int

	// counts are what the client did, for tests.
	counts struct{ attempts, lookups, hints, redirects, warmups, probes, awaited atomic.Int64 }
}

// downFor is how long an endpoint that failed to answer is tried after
// the others, and a hint naming it ignored: about one election, after
// which a restarted node may be back.
const downFor = time.Second

// idleConnsMax bounds the idle connections the client's own HTTP client
// keeps, to all nodes together and to any one. Over HTTP/1.1 a connection
// carries one request at a time, so a client keeps open as many as it has
// requests in flight to a node: its watches (each long poll holds one)
// and concurrent writes. A smaller cap per node would close every
// connection beyond it as its request ends, and dial again for the next
// (1,000 long polls woken by one write, with a cap of 64, closed 936
// connections and dialed 936 more, each a TLS handshake on the node).
// Idle connections still close after 30 s; the nodes accept 4,096 at once
// by default (--http-max-connections).
const idleConnsMax = 4096

// NewTransport returns the HTTP transport a client of cfg makes for
// itself when cfg.HTTPClient is nil and it speaks HTTP (cfg.NoWire or
// cfg.HTTP2; otherwise its HTTP fallback): its idle connection limits,
// cfg.TLS, the TLS handshake bounded by cfg.AttemptTimeout, and HTTP/2
// if cfg.HTTP2. A program that wraps the transport (to count or record
// what it sends) starts from it.
func NewTransport(cfg Config) *http.Transport {
	tr := &http.Transport{MaxIdleConns: idleConnsMax, MaxIdleConnsPerHost: idleConnsMax, IdleConnTimeout: 30 * time.Second,
		TLSClientConfig: cfg.TLS, TLSHandshakeTimeout: cfg.AttemptTimeout}
	if cfg.HTTP2 {
		tr.Protocols = HTTP2Protocols(cfg.TLS != nil)
	}
	return tr
}

// New returns a client of the cluster.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	switch {
	case hc == nil && !cfg.NoWire && !cfg.HTTP2:
		fallback := NewTransport(cfg)
		wire := apiwire.NewTransport(apiwire.TransportConfig{TLS: cfg.TLS, DialTimeout: cfg.AttemptTimeout,
			Fallback: fallback, FallbackFor: cfg.WireFallbackFor})
		// A TLS connection made to try wire that agreed on HTTP/1.1
		// carries the fallback's first request: no second handshake.
		fallback.DialTLSContext = wire.DialFallbackTLS
		hc = &http.Client{Transport: wire}
	case hc == nil:
		hc = &http.Client{Transport: NewTransport(cfg)}
	}
	var b [8]byte
	_, _ = crand.Read(b[:])
	id := binary.BigEndian.Uint64(b[:]) | 1 // never 0: 0 means no session
	n := len(cfg.Endpoints)
	c := &Client{cfg: cfg, http: hc, id: id, nextSeq: 1, pending: map[uint64]bool{},
		leaderAt: -1, index: make(map[string]int, n), nodes: make([]uint64, n), downUntil: make([]time.Time, n), ready: make([]*readiness, n), answeredAt: make([]time.Time, n)}
	for i, ep := range cfg.Endpoints {
		if _, dup := c.index[ep]; !dup {
			c.index[ep] = i
		}
	}
	return c, nil
}

// HTTP2Protocols returns the protocols of an http.Transport that speaks
// HTTP/2 to coord nodes (Config.HTTP2): over TLS, HTTP/2 where ALPN
// agrees on it and HTTP/1.1 elsewhere; in plain mode, h2c with prior
// knowledge only (net/http uses it for http:// URLs only when HTTP/1.1 is
// left out).
func HTTP2Protocols(tls bool) *http.Protocols {
	p := new(http.Protocols)
	if tls {
		p.SetHTTP1(true)
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return p
}

// ID returns the client's session id.
func (c *Client) ID() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.id
}

// begin takes the next sequence number of the current session.
func (c *Client) begin() (id, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seq = c.nextSeq
	c.nextSeq++
	c.pending[seq] = true
	return c.id, seq
}

// resetSession starts a new session: a new client id, sequence numbers
// from 1. Writes in flight on the old one finish as they may.
func (c *Client) resetSession() {
	var b [8]byte
	_, _ = crand.Read(b[:])
	c.mu.Lock()
	defer c.mu.Unlock()
	c.id = binary.BigEndian.Uint64(b[:]) | 1
	c.nextSeq = 1
	c.pending = map[uint64]bool{}
}

// ack returns the highest sequence number below which every write of
// session id is done; 0 (forget nothing) for a session already replaced.
func (c *Client) ack(id uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id != c.id {
		return 0
	}
	low := c.nextSeq
	for seq := range c.pending {
		low = min(low, seq)
	}
	return low - 1
}

// end marks a write done, answered or abandoned. An abandoned write that
// reaches the cluster after a later write acknowledged it is refused, never
// applied late.
func (c *Client) end(id, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id == c.id {
		delete(c.pending, seq)
	}
}

// call is one API request, retried across endpoints.
type call struct {
	method, path string
	query        url.Values
	body         []byte
	write        bool
	// sessionless sends a write that may apply twice harmlessly without a
	// session (client_id, seq, ack).
	sessionless bool
	timeout     time.Duration // per attempt; 0: the config's
	// warmUp marks a warm-up's request: its answer looks nothing up (the
	// warm-up's other answers name the nodes).
	warmUp bool
	// linearizable marks a call that is no write but whose success the
	// answering node could only give through a leader: a linearizable
	// read (a read index from the leader, or forwarded to it), a change
	// of membership.
	linearizable bool
	// spreads marks a call that a follower serves itself rather than
	// forward over HTTP to the leader: a write it forwards as a Raft
	// proposal (server's forwardsAsProposal: put, delete, batch,
	// acquire, release), a read of a key or a stale read, a watch of a
	// key. Under Config.Spread its rounds start at the next endpoint in
	// turn instead of the leader's.
	spreads bool
}

// reachesLeader reports whether a 2xx answer to k shows that the node
// reached a leader: a write's (committed) or a linearizable call's. A
// stale read, a status, a list of tokens, a watch, and a refusal (a
// 4xx, which the node's own checks may give) show only that it is up: a
// node cut off from its leader still gives them.
func (k call) reachesLeader() bool {
	return !k.warmUp && (k.write || k.linearizable)
}

// do runs the call until a node answers, decoding a 2xx JSON answer into
// out. Non-2xx answers other than 503 become *Error.
func (c *Client) do(ctx context.Context, k call, out any) error {
	if k.query == nil {
		k.query = url.Values{}
	}
	var id, seq uint64
	session := k.write && !k.sessionless
	if session {
		id, seq = c.begin()
		defer c.end(id, seq)
		k.query.Set(api.ParamClientID, strconv.FormatUint(id, 10))
		k.query.Set(api.ParamSeq, strconv.FormatUint(seq, 10))
	}
	c.keepWarm()
	backoff := c.cfg.BackoffMin
	var last error
	unknown := false // some attempt of this write may have applied
	n := len(c.cfg.Endpoints)
	tried := make([]bool, n)
	// redirected[i]: since the last back-off, a refusal that named the
	// node at endpoint i sent an attempt there at once. A second refusal
	// naming it waits for the back-off, so that nodes naming each other
	// (a candidate named by a stale follower) cannot spin.
	redirected := make([]bool, n)
	for {
		clear(tried)
		start, spread := c.roundStart(k)
		for ep := c.first(start); ep >= 0; {
			tried[ep] = true
			if session {
				k.query.Set(api.ParamAck, strconv.FormatUint(c.ack(id), 10))
			}
			named, err := c.attemptAt(ctx, c.cfg.Endpoints[ep], k, out)
			if k.write && errors.Is(err, ErrStaleSequence) {
				// The cluster no longer knows this session (evicted): this
				// write's fate is unknown, and later writes need a session
				// it will accept.
				c.resetSession()
				return fmt.Errorf("%w: %w", ErrUnknown, err)
			}
			if k.write && err != nil && mayHaveApplied(err) {
				unknown = true
			}
			if err == nil || !retryable(err) {
				// Answered (a non-retryable error is always the cluster's
				// answer): this endpoint serves, so try it first next time,
				// unless the answer named the leader (noteAnswer preferred
				// it) or a lookup of the leader chose another meanwhile (a
				// follower's answer, forwarded, must not undo either). A
				// spread call's round did not start at the preferred
				// endpoint: it leaves the preference alone.
				c.mu.Lock()
				if !spread && c.preferred == start && c.leaderAt != start {
					c.preferred = ep
				}
				c.mu.Unlock()
				return err
			}
			// An attempt cut short by ctx's end says less than the one
			// before it (a dial the deadline stopped, after a handshake
			// that failed on its own), as in OpenSession.
			if last == nil || ctx.Err() == nil {
				last = err
			}
			if ctx.Err() != nil {
				return c.giveUp(k, unknown, ctx.Err(), last)
			}
			if to := redirect(err, ep, named, redirected); to >= 0 {
				// A refusal that names the leader is a redirect, not a
				// failure: go there now, even if this round tried it
				// already (it may have led only since).
				redirected[to] = true
				c.counts.redirects.Add(1)
				ep = to
				continue
			}
			ep = c.next(tried, ep)
		}
		select {
		case <-ctx.Done():
			return c.giveUp(k, unknown, ctx.Err(), last)
		case <-time.After(backoff/2 + rand.N(backoff/2+1)):
		}
		clear(redirected)
		backoff = min(2*backoff, c.cfg.BackoffMax)
	}
}

// roundStart returns the endpoint a round of attempts of k starts with,
// and whether it is k's turn in the spread (Config.Spread and k.spreads)
// rather than the preferred endpoint (the leader, if known). Its turn
// skips the endpoints that failed to answer lately, unless all did, so
// that the live ones share a stopped one's turns evenly.
func (c *Client) roundStart(k call) (start int, spread bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.cfg.Spread || !k.spreads {
		return c.preferred, false
	}
	n := len(c.cfg.Endpoints)
	now := time.Now()
	start = c.turn % n
	for i := range n {
		if ep := (c.turn + i) % n; !now.Before(c.downUntil[ep]) {
			start = ep
			break
		}
	}
	c.turn = (start + 1) % n
	return start, true
}

// redirect returns the endpoint the next attempt goes to at once after
// the attempt at endpoint ep failed with err, having named the leader at
// endpoint named (noteAnswer: -1 if none, or if it failed to answer
// lately): named, if err is the cluster's refusal (unavailable, 503),
// named is another endpoint, and no refusal sent an attempt there since
// the last back-off; else -1 (the round goes on as usual).
func redirect(err error, ep, named int, redirected []bool) int {
	var e *Error
	if named < 0 || named == ep || redirected[named] || !errors.As(err, &e) ||
		e.Status != http.StatusServiceUnavailable || e.Code != api.CodeUnavailable {
		return -1
	}
	return named
}

// first returns the endpoint a round starts with: the preferred one (the
// leader, if known), unless it failed to answer lately and another did
// not.
func (c *Client) first(preferred int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if !now.Before(c.downUntil[preferred]) {
		return preferred
	}
	n := len(c.cfg.Endpoints)
	for i := 1; i < n; i++ {
		if ep := (preferred + i) % n; !now.Before(c.downUntil[ep]) {
			return ep
		}
	}
	return preferred
}

// next returns the endpoint to try after ep in this round, -1 if every
// one was tried: the leader an answer named (noteAnswer made it the
// preferred one) if not tried yet, else the next in order that did not
// fail to answer lately, else the next in order.
func (c *Client) next(tried []bool, ep int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.preferred; !tried[p] {
		return p
	}
	now := time.Now()
	n := len(tried)
	fallback := -1
	for i := 1; i < n; i++ {
		e := (ep + i) % n
		if tried[e] {
			continue
		}
		if !now.Before(c.downUntil[e]) {
			return e
		}
		if fallback < 0 {
			fallback = e
		}
	}
	return fallback
}

// giveUp is the error of a call whose context ended. A write is of unknown
// outcome only if some attempt may have applied it; the last attempt's
// error is wrapped too (errors.Is(err, ErrDiskFull), say).
func (c *Client) giveUp(k call, unknown bool, ctxErr, last error) error {
	if k.write && unknown {
		return fmt.Errorf("%w: %w: %s %s: %w (last: %w)", ErrUnavailable, ErrUnknown, k.method, k.path, ctxErr, last)
	}
	return fmt.Errorf("%w: %s %s: %w (last: %w)", ErrUnavailable, k.method, k.path, ctxErr, last)
}

// retryable reports whether another node (or a later attempt) might answer.
func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status >= 500
	}
	return true // transport errors: connection refused, reset, timeout
}

// attempt sends one attempt of k to endpoint, decoding a 2xx JSON answer
// into out.
func (c *Client) attempt(ctx context.Context, endpoint string, k call, out any) error {
	_, err := c.attemptAt(ctx, endpoint, k, out)
	return err
}

// attemptAt is attempt, and also returns the index of the endpoint of the
// leader the answer named (Coord-Leader), -1 if none, no answer, or one
// that failed to answer lately (noteAnswer).
func (c *Client) attemptAt(ctx context.Context, endpoint string, k call, out any) (named int, err error) {
	named = -1
	timeout := k.timeout
	if timeout == 0 {
		timeout = c.cfg.AttemptTimeout
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	base, err := c.cfg.baseURL(endpoint)
	if err != nil {
		return named, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	u := base + k.path
	if len(k.query) > 0 {
		u += "?" + k.query.Encode()
	}
	req, err := http.NewRequestWithContext(actx, k.method, u, bytes.NewReader(k.body))
	if err != nil {
		return named, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if c.cfg.Token != "" {
		req.Header.Set(api.HeaderAuthorization, api.BearerPrefix+c.cfg.Token)
	}
	var sent atomic.Bool // the whole request was written to a connection
	req = req.WithContext(httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { sent.Store(true) },
	}))
	// fate settles, once, whether the answer came first (attemptAnswered)
	// or watchAttempt abandoned the attempt (attemptAbandoned): an answer
	// whose headers arrived while a probe was out is read whole, not
	// cancelled by that probe's failure and sent again.
	var fate atomic.Int32
	answered := make(chan struct{})
	if k.warmUp {
		// The warm-up's own context bounds it; a probe of a probe is
		// pointless.
		close(answered)
	} else {
		go c.watchAttempt(actx, cancel, endpoint, timeout, &sent, &fate, answered)
	}
	c.counts.attempts.Add(1)
	resp, err := c.http.Do(req)
	if !k.warmUp {
		fate.CompareAndSwap(attemptWaiting, attemptAnswered)
		close(answered)
	}
	if err != nil {
		if ctx.Err() == nil {
			// Not the caller's own end: the node did not answer at all,
			// or was abandoned (watchAttempt).
			c.noteDown(endpoint)
			if cause := context.Cause(actx); cause != nil && !errors.Is(cause, context.Canceled) {
				err = fmt.Errorf("%w (%w)", cause, err)
			}
		}
		return named, err
	}
	defer resp.Body.Close()
	named = c.noteAnswer(endpoint, resp.Header, !k.warmUp)
	if resp.StatusCode/100 == 2 && k.reachesLeader() {
		c.noteProgress(endpoint)
	}
	// The answer has begun: its body is bounded by the attempt timeout,
	// so that a node that stops halfway does not hold the call.
	stopBody := time.AfterFunc(timeout, func() {
		cancel(fmt.Errorf("client: %s: answer's body not read within %v", endpoint, timeout))
	})
	defer stopBody.Stop()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return named, err
	}
	if resp.StatusCode/100 == 2 {
		if out == nil {
			return named, nil
		}
		if err := json.Unmarshal(raw, out); err != nil {
			return named, fmt.Errorf("client: %s: decode answer: %w", endpoint, err)
		}
		return named, nil
	}
	return named, errorOf(resp.StatusCode, raw)
}

// watchAttempt decides when an attempt at endpoint that has no answer yet
// is abandoned (actx cancelled, the connection closed), and when it is
// awaited. The attempt's timeout (AttemptTimeout, or the call's own)
// bounds what shows a node is unreachable, not how long a live node may
// take:
//   - a node that answered another request of this client through a
//     leader (a write or a linearizable read that succeeded:
//     call.reachesLeader) within the last AttemptTimeout is making
//     progress: the attempt is
//     awaited, with no probe (under overload, hundreds of slow requests
//     in flight to one node see answers all the time);
//   - else a request not even written by then (the dial, the TLS
//     handshake or the write is stuck) is abandoned;
//   - a written one is checked by the node's readiness probe (GET
//     /readyz, on another connection), sent early enough that its answer
//     is due by the timeout: bound is min(timeout, AttemptTimeout)/2. A
//     node that answers "ok" is alive, in touch with a leader and caught
//     up: it is slow, not gone, and the attempt is awaited, checked again
//     every AttemptTimeout, up to the caller's deadline. Retrying it
//     elsewhere would only add a second copy of the request to a loaded
//     cluster (the first still in flight) and a new connection. A node
//     that does not answer the probe in time, or is not ready (no leader
//     known, cut off from it, far behind), is abandoned, and the call
//     tried elsewhere.
//
// It abandons the attempt only if its answer has not come (fate still
// attemptWaiting), and returns when answered is closed or actx ends.
func (c *Client) watchAttempt(actx context.Context, cancel context.CancelCauseFunc, endpoint string, timeout time.Duration, sent *atomic.Bool, fate *atomic.Int32, answered <-chan struct{}) {
	abandon := func(cause error) {
		if fate.CompareAndSwap(attemptWaiting, attemptAbandoned) {
			cancel(cause)
		}
	}
	bound := min(timeout, c.cfg.AttemptTimeout) / 2
	start := time.Now()
	timer := time.NewTimer(timeout - bound)
	defer timer.Stop()
	for {
		select {
		case <-answered:
			return
		case <-actx.Done():
			return
		case <-timer.C:
		}
		if c.answeredWithin(endpoint, c.cfg.AttemptTimeout) {
			// The node answers this client's other requests: it is making
			// progress, only not on this one yet. Nothing to ask it.
			c.counts.awaited.Add(1)
			timer.Reset(c.cfg.AttemptTimeout)
			continue
		}
		if !sent.Load() {
			if left := timeout - time.Since(start); left > 0 {
				timer.Reset(left)
				continue
			}
			abandon(fmt.Errorf("client: %s: request not sent within %v", endpoint, timeout))
			return
		}
		if err := c.probe(actx, endpoint, bound); err != nil {
			abandon(fmt.Errorf("client: %s: no answer within %v, and %w", endpoint, timeout, err))
			return
		}
		c.counts.awaited.Add(1)
		timer.Reset(c.cfg.AttemptTimeout)
	}
}

// The fates of an attempt (attemptAt, watchAttempt).
const (
	attemptWaiting int32 = iota
	attemptAnswered
	attemptAbandoned
)

// answeredWithin reports whether endpoint gave this client an answer
// through a leader (noteProgress) within the last d.
func (c *Client) answeredWithin(endpoint string, d time.Duration) bool {
	i, ok := c.index[endpoint]
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Since(c.answeredAt[i]) < d
}

// readiness is one readiness probe of an endpoint, shared by every
// attempt there that asks while it is in flight or fresh: 1,024 slow
// writes in flight to one node make one probe, not 1,024 (each on a new
// connection, the pool's being busy).
type readiness struct {
	done  chan struct{} // closed when the probe has ended
	err   error         // nil: ready; set before done is closed
	ended time.Time     // when it ended; zero while in flight (c.mu)
}

// probe returns whether endpoint's node is ready, by its readiness probe
// (GET /readyz) bounded by bound: nil if it answered that it is. A probe
// in flight, or one that ended less than bound ago, is shared.
func (c *Client) probe(ctx context.Context, endpoint string, bound time.Duration) error {
	i, ok := c.index[endpoint]
	if !ok {
		return fmt.Errorf("client: %s: not an endpoint", endpoint)
	}
	c.mu.Lock()
	r := c.ready[i]
	if r == nil || (!r.ended.IsZero() && time.Since(r.ended) >= bound) {
		r = &readiness{done: make(chan struct{})}
		c.ready[i] = r
		go func() {
			err := c.probeOnce(endpoint, bound)
			c.mu.Lock()
			r.err, r.ended = err, time.Now()
			c.mu.Unlock()
			close(r.done)
		}()
	}
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// probeOnce sends one GET /readyz to endpoint, bounded by bound.
func (c *Client) probeOnce(endpoint string, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	base, err := c.cfg.baseURL(endpoint)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return err
	}
	c.counts.probes.Add(1)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("its readiness probe failed: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("its readiness probe answered %s", resp.Status)
	}
	return nil
}

// noteProgress records that endpoint answered a request through a leader
// now (call.reachesLeader).
func (c *Client) noteProgress(endpoint string) {
	if i, ok := c.index[endpoint]; ok {
		c.mu.Lock()
		c.answeredAt[i] = time.Now()
		c.mu.Unlock()
	}
}

// noteDown records that endpoint did not answer at all: for downFor, a
// hint naming it is not followed and rounds try it last, and if it was
// preferred, the next endpoint is.
func (c *Client) noteDown(endpoint string) {
	i, ok := c.index[endpoint]
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.downUntil[i] = time.Now().Add(downFor)
	if c.preferred == i {
		c.preferred = (i + 1) % len(c.cfg.Endpoints)
	}
}

// noteAnswer learns from the headers of an answer from endpoint: which
// node answers there (Coord-Node), and which node leads (Coord-Leader). A
// leader the client has an address for becomes the preferred endpoint at
// once, whatever the answer was (a refusal of a node that no longer
// leads names its successor), unless it failed to answer lately; one it
// has none for is looked up if lookup. It returns the index of the
// leader's endpoint if the client may go there now, -1 if none is named,
// its address is unknown, or it failed to answer lately (downUntil).
func (c *Client) noteAnswer(endpoint string, h http.Header, lookup bool) int {
	node, _ := strconv.ParseUint(h.Get(api.HeaderNode), 10, 64)
	leader, _ := strconv.ParseUint(h.Get(api.HeaderLeader), 10, 64)
	i, known := c.index[endpoint]
	c.mu.Lock()
	if known {
		c.downUntil[i] = time.Time{}
		if node != 0 {
			c.nodes[i] = node
		}
	}
	if leader == 0 {
		c.leaderAt = -1
		c.mu.Unlock()
		return -1
	}
	at := slices.Index(c.nodes, leader)
	c.leaderAt = at
	up := at >= 0 && !time.Now().Before(c.downUntil[at])
	followed := up && at != c.preferred
	if followed {
		c.preferred = at
	}
	c.mu.Unlock()
	switch {
	case followed:
		c.counts.hints.Add(1)
	case at < 0 && leader != node && lookup:
		// Answered through (or refused by) a node that knows a leader the
		// client has no address for: look it up.
		c.learnLeader(endpoint)
	}
	if !up {
		return -1
	}
	return at
}

// learnLeader asks endpoint, in the background and at most once a second,
// which member leads and at what HTTP address, and prefers that endpoint
// if the client knows it. It is the fallback for a leader the client has
// not heard answer yet (the warm-up learns every endpoint's node).
func (c *Client) learnLeader(endpoint string) {
	c.mu.Lock()
	if c.learning || time.Since(c.learnedAt) < time.Second {
		c.mu.Unlock()
		return
	}
	c.learning, c.learnedAt = true, time.Now()
	c.mu.Unlock()
	c.counts.lookups.Add(1)
	go func() {
		defer func() {
			c.mu.Lock()
			c.learning = false
			c.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.AttemptTimeout)
		defer cancel()
		st, err := c.Status(ctx, endpoint)
		if err != nil {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, m := range st.Members {
			if m.HTTP == "" {
				continue
			}
			for i, ep := range c.cfg.Endpoints {
				if hostPort(ep) != m.HTTP {
					continue
				}
				c.nodes[i] = m.ID
				if m.ID == st.Leader {
					c.preferred = i
				}
			}
		}
	}()
}

// keepWarm starts a warm-up if the last one is WarmInterval old: a GET
// /healthz to every endpoint at once, in the background, which leaves an
// open connection to each in the HTTP client's pool and tells the client
// which node answers where (noteAnswer).
func (c *Client) keepWarm() {
	if c.cfg.WarmInterval <= 0 {
		return
	}
	c.mu.Lock()
	if c.warming || (!c.warmedAt.IsZero() && time.Since(c.warmedAt) < c.cfg.WarmInterval) {
		c.mu.Unlock()
		return
	}
	c.warming = true
	c.mu.Unlock()
	go func() {
		c.warmUp(context.Background())
		c.mu.Lock()
		c.warming = false
		c.mu.Unlock()
	}()
}

// warmUp sends GET /healthz to every endpoint at once, each bounded by
// AttemptTimeout, and returns when all have answered or failed.
func (c *Client) warmUp(ctx context.Context) {
	c.mu.Lock()
	c.warmedAt = time.Now()
	c.mu.Unlock()
	c.counts.warmups.Add(1)
	var wg sync.WaitGroup
	for _, ep := range c.cfg.Endpoints {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
			defer cancel()
			_ = c.attempt(actx, ep, call{method: "GET", path: "/healthz", warmUp: true}, nil)
		})
	}
	wg.Wait()
}

// KeyValue is a key as the cluster holds it.
type KeyValue struct {
	Key   string
	Value []byte
	// Revision is the log index of the last write to the key; 0 when the
	// key does not exist.
	Revision       uint64
	CreateRevision uint64
	Version        uint64
}

func (kv *KeyValue) from(r api.KeyResponse) error {
	kv.Key, kv.Revision, kv.CreateRevision, kv.Version = r.Key, r.Revision, r.CreateRevision, r.Version
	kv.Value = []byte(r.Value)
	if r.ValueBase64 != "" {
		v, err := base64.StdEncoding.DecodeString(r.ValueBase64)
		if err != nil {
			return fmt.Errorf("client: value_base64: %w", err)
		}
		kv.Value = v
	}
	return nil
}

// ReadOption changes how a read is served.
type ReadOption func(url.Values)

// Stale makes a read local to whichever node serves it: fast, available in
// a minority partition, and possibly out of date.
func Stale() ReadOption { return func(q url.Values) { q.Set(api.ParamStale, "true") } }

func keyPath(key string) string { return "/v1/kv/" + pathSegment(key) }

// pathSegment escapes s as one segment of a URL path. "." and ".." are
// escaped too: left as they are, the server's path cleaning takes them for
// dot segments, and the request names another key or none.
func pathSegment(s string) string {
	if s == "." || s == ".." {
		return strings.ReplaceAll(s, ".", "%2E")
	}
	return url.PathEscape(s)
}

// watchArgs checks what WatchKey and WatchLease are given: a watch of ""
// would wait out its bound, and a negative wait would make every attempt
// time out before it starts.
func watchArgs(name string, wait time.Duration) error {
	if name == "" {
		return fmt.Errorf("%w: empty key or lease name", ErrInvalid)
	}
	if wait < 0 {
		return fmt.Errorf("%w: negative wait %v", ErrInvalid, wait)
	}
	return nil
}

// Put sets key to value and returns the new revision.
func (c *Client) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return c.writeKey(ctx, "PUT", key, value, nil)
}

// PutIf sets key to value only if its revision is prev (0: the key must
// not exist). On a mismatch the error matches ErrConflict and, as an
// *Error, carries the current revision.
func (c *Client) PutIf(ctx context.Context, key string, value []byte, prev uint64) (uint64, error) {
	return c.writeKey(ctx, "PUT", key, value, &prev)
}

// Delete removes key. ErrNotFound if it does not exist.
func (c *Client) Delete(ctx context.Context, key string) (uint64, error) {
	return c.writeKey(ctx, "DELETE", key, nil, nil)
}

// DeleteIf removes key only if its revision is prev.
func (c *Client) DeleteIf(ctx context.Context, key string, prev uint64) (uint64, error) {
	return c.writeKey(ctx, "DELETE", key, nil, &prev)
}

// writeKey puts or deletes key, on condition that its revision is *prev
// if prev is not nil, and returns the revision of the write.
func (c *Client) writeKey(ctx context.Context, method, key string, value []byte, prev *uint64) (uint64, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	q := url.Values{}
	if prev != nil {
		q.Set(api.ParamPrevRevision, strconv.FormatUint(*prev, 10))
	}
	var out api.WriteResponse
	err := c.do(ctx, call{method: method, path: keyPath(key), query: q, body: value, write: true, spreads: true}, &out)
	return out.Revision, err
}

// Get returns key. ErrNotFound if it does not exist.
func (c *Client) Get(ctx context.Context, key string, opts ...ReadOption) (KeyValue, error) {
	if key == "" {
		return KeyValue{}, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	q := url.Values{}
	for _, o := range opts {
		o(q)
	}
	var r api.KeyResponse
	if err := c.do(ctx, call{method: "GET", path: keyPath(key), query: q, linearizable: q.Get(api.ParamStale) == "", spreads: true}, &r); err != nil {
		return KeyValue{Key: key}, err
	}
	var kv KeyValue
	return kv, kv.from(r)
}

// WatchKey waits up to wait for key's revision to differ from revision (0:
// absent), and returns the key as it then is; Revision 0 means absent.
// An empty key or a negative wait is ErrInvalid.
func (c *Client) WatchKey(ctx context.Context, key string, revision uint64, wait time.Duration) (KeyValue, error) {
	if err := watchArgs(key, wait); err != nil {
		return KeyValue{Key: key}, err
	}
	q := url.Values{api.ParamRevision: {strconv.FormatUint(revision, 10)}, api.ParamTimeoutMs: {strconv.FormatInt(wait.Milliseconds(), 10)}}
	var r api.KeyResponse
	err := c.do(ctx, call{method: "GET", path: "/v1/watch/kv/" + pathSegment(key), query: q, timeout: wait + c.cfg.AttemptTimeout, spreads: true}, &r)
	if errors.Is(err, ErrNotFound) {
		return KeyValue{Key: key}, nil
	}
	if err != nil {
		return KeyValue{Key: key}, err
	}
	var kv KeyValue
	return kv, kv.from(r)
}

// errorOf is the *Error of a non-2xx answer with this status and body: the
// API's error object when the body is one, else the body's text.
func errorOf(status int, raw []byte) *Error {
	var body api.ErrorResponse
	_ = json.Unmarshal(raw, &body)
	if body.Error == "" {
		body.Error = strings.TrimSpace(string(raw))
	}
	e := &Error{Status: status, Code: body.Code, Message: body.Error}
	if body.Revision != nil {
		e.Revision = *body.Revision
	}
	if body.Holder != nil {
		e.Holder = *body.Holder
	}
	if body.Token != nil {
		e.Token = *body.Token
	}
	e.Key = body.Key
	return e
}

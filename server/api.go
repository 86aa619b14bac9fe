package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"coord/api"
	"coord/apiwire"
	"coord/storage/vfs"
)

// watchTimeoutMax bounds one long poll; watchTimeoutDefault is its wait
// when the request names none.
const (
	watchTimeoutMax     = 5 * time.Minute
	watchTimeoutDefault = 30 * time.Second
)

// APIConfig configures an API.
type APIConfig struct {
	// Limits must match the state machine's, so that oversize requests are
	// refused before they are proposed.
	Limits Limits
	// Client forwards requests to the leader. Nil: a client with no
	// overall timeout (requests carry their own contexts).
	Client *http.Client
	// Logger logs forwarding failures and the like. Nil: slog.Default().
	Logger *slog.Logger
	// Metrics, if not nil, counts requests.
	Metrics *Metrics
	// Auth makes the API check bearer tokens (auth.go); off only on a
	// node run with --insecure.
	Auth bool
	// ForwardScheme is the scheme of requests forwarded to the leader:
	// "https" on a node that serves HTTPS (Client then carries the TLS
	// configuration). "": http.
	ForwardScheme string
	// WatchesMax bounds the watches served at once (HTTPLimits.WatchesMax).
	// 0: DefaultHTTPLimits().WatchesMax.
	WatchesMax int
	// Pprof serves the Go profiler at /debug/pprof/ (admin tokens only).
	Pprof bool
	// SessionKeepAlive is how often a lease session stream sends a
	// keep-alive; SessionGrace how long after a session closes from the
	// holder's side the leader frees its lease (session.go). 0: the
	// defaults, SessionKeepAliveDefault and SessionGraceDefault.
	SessionKeepAlive, SessionGrace time.Duration
	// StreamWriteTimeout bounds how long an event stream may take to hand
	// one event (or a keep-alive) to its client's connection; a client that
	// does not read for that long is cut off, and its next watch starts
	// from the latest state. 0: StreamWriteTimeoutDefault.
	StreamWriteTimeout time.Duration
}

// StreamWriteTimeoutDefault is APIConfig.StreamWriteTimeout's default: long
// beside any event's write on a live connection, short beside how long a
// stuck client would otherwise hold a goroutine, a connection and a place
// under WatchesMax.
const StreamWriteTimeoutDefault = 10 * time.Second

// API serves the HTTP/JSON API (docs/API.md) over a Replica. Any node
// accepts any request: writes and linearizable reads that need the leader
// are forwarded to it.
//
// API is safe for concurrent use.
type API struct {
	replica Replica
	cfg     APIConfig
	mux     *http.ServeMux
	watches *watchLimit
	// frames shares the encoded events of key watches (eventframes.go);
	// nil shares none (a benchmark's baseline).
	frames *eventFrames
	// peers asks the other members for their status, for the dashboard.
	peers *peerPoller
	// sessions are the lease session streams this node serves as leader.
	sessions sessionRegistry
	// nodeHeaders are the values of Coord-Node and Coord-Leader that
	// answers share (setNodeHeaders), for the leader last seen.
	nodeHeaders atomic.Pointer[nodeHeaderValues]
}

// NewAPI returns the API of replica.
func NewAPI(replica Replica, cfg APIConfig) *API {
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits()
	}
	if cfg.StreamWriteTimeout <= 0 {
		cfg.StreamWriteTimeout = StreamWriteTimeoutDefault
	}
	if cfg.WatchesMax <= 0 {
		cfg.WatchesMax = DefaultHTTPLimits().WatchesMax
	}
	if cfg.SessionKeepAlive <= 0 {
		cfg.SessionKeepAlive = SessionKeepAliveDefault
	}
	if cfg.SessionGrace <= 0 {
		cfg.SessionGrace = SessionGraceDefault
	}
	a := &API{replica: replica, cfg: cfg, mux: http.NewServeMux(), watches: newWatchLimit(cfg.WatchesMax, cfg.Metrics), peers: &peerPoller{},
		frames: &eventFrames{}}
	a.handle("GET /v1/status", "status", a.status)
	a.handle("GET /v1/kv/{key...}", "kv_get", a.getKey)
	a.handle("PUT /v1/kv/{key...}", "kv_put", a.putKey)
	a.handle("DELETE /v1/kv/{key...}", "kv_delete", a.deleteKey)
	a.handleWithToken("POST /v1/batch", "kv_batch", a.batch)
	a.handle("GET /v1/watch/kv/{key...}", "kv_watch", a.watchKey)
	a.handle("POST /v1/leases/{name}/acquire", "lease_acquire", a.acquire)
	a.handle("POST /v1/leases/{name}/renew", "lease_renew", a.renew)
	a.handle("POST /v1/leases/{name}/release", "lease_release", a.release)
	a.handle("GET /v1/leases/{name}", "lease_get", a.getLease)
	a.handle("GET /v1/watch/leases/{name}", "lease_watch", a.watchLease)
	a.handle("GET /v1/leases/{name}/session", "lease_session", a.leaseSession)
	a.handle("GET /v1/members", "members", a.members)
	a.handle("POST /v1/members", "member_add", a.addMember)
	a.handle("DELETE /v1/members/{id}", "member_remove", a.removeMember)
	a.handle("POST /v1/auth/tokens", "token_create", a.createToken)
	a.handle("GET /v1/auth/tokens", "token_list", a.listTokens)
	a.handle("DELETE /v1/auth/tokens/{id}", "token_revoke", a.revokeToken)
	if cfg.Metrics != nil {
		a.mux.Handle("GET /metrics", a.guarded("metrics", cfg.Metrics.Handler()))
	}
	a.handleObservability() // health.go: /healthz, /readyz, /ui/, the dashboard, pprof
	return a
}

// ServeHTTP serves one request.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// request is one API call in flight: its body is read up front so that it
// can be forwarded.
type request struct {
	*http.Request
	body []byte
	// route names the request's entry in routeAccess: a linearizable
	// read checks the token again after its read barrier.
	route string
	// proposed is set once this node proposed the write and could not
	// tell its outcome: a failure to forward it after that is of unknown
	// outcome too, never "unavailable".
	proposed bool
	// params is the query, parsed at its first use (param) when it is
	// too long to scan (queryScanParamsMax).
	params       url.Values
	paramsParsed bool
}

// param returns the query parameter name, as r.URL.Query().Get(name)
// does. A short query, every client's (a write names client_id, seq and
// ack, and perhaps prev_revision), is scanned for the name on each call
// (queryValue), which allocates nothing: a url.Values map of slices was
// 4-6 allocations per write on the leader's path (issue 21). A long one is
// parsed once into its map.
func (r *request) param(name string) string {
	raw := r.URL.RawQuery
	if raw == "" {
		return ""
	}
	if strings.Count(raw, "&") < queryScanParamsMax {
		return queryValue(raw, name)
	}
	if !r.paramsParsed {
		r.params, r.paramsParsed = r.URL.Query(), true
	}
	return r.params.Get(name)
}

// queryScanParamsMax is the parameters above which param parses the query
// into a map rather than scan it on each call: far below net/url's own
// bound on a query's parameters (GODEBUG urlmaxqueryparams, 10,000 by
// default), past which it parses none, which queryValue does not mimic.
const queryScanParamsMax = 32

// queryValue returns the first value of the parameter name in the raw
// query, or "", exactly as url.ParseQuery(raw) followed by Get(name)
// would (TestQueryValueMatchesParseQuery, FuzzQueryValue): pairs are
// separated by '&', a pair holding ';' or an invalid escape is skipped,
// keys and values are unescaped ('+' is a space). It allocates only to
// unescape a value that needs it.
func queryValue(raw, name string) string {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		key, value, _ := strings.Cut(pair, "=")
		key, err := url.QueryUnescape(key)
		if err != nil || key != name {
			continue
		}
		if value, err = url.QueryUnescape(value); err != nil {
			continue
		}
		return value
	}
	return ""
}

func (a *API) handle(pattern, route string, h func(http.ResponseWriter, *request) error) {
	a.handleWithToken(pattern, route, func(w http.ResponseWriter, r *request, _ Token) error { return h(w, r) })
}

// handleWithToken is handle for a handler that checks more of a request
// against its token than the route's entry in routeAccess says (a batch:
// the keys in its body). It is given the token the guard resolved (the
// zero Token without tokens), by value: kept in the request, it would
// make every request's allocation larger, for one route.
func (a *API) handleWithToken(pattern, route string, h func(http.ResponseWriter, *request, Token) error) {
	checkRoute(route)
	observe := a.cfg.Metrics.routeObserver(route)
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		call := &handlerCall{statusRecorder: statusRecorder{ResponseWriter: w, code: http.StatusOK}}
		call.request = request{Request: r, route: route}
		rec := &call.statusRecorder
		a.setNodeHeaders(rec.Header())
		tok, answered := a.guard(rec, r, route)
		if !answered {
			body, err := readBody(rec, r, bodyBytesMax(route, a.cfg.Limits))
			if err == nil {
				call.request.body = body
				err = h(rec, &call.request, tok)
			} else {
				err = fmt.Errorf("%w: body: %v", ErrInvalid, err)
			}
			if err != nil {
				a.writeError(rec, err)
			}
		}
		observe(rec.code, time.Since(start))
	})
}

// handlerCall is what one request's handling allocates, in one
// allocation: the recorder of its status and its request.
type handlerCall struct {
	statusRecorder
	request request
}

// setNodeHeaders sets Coord-Node and, if a leader is known, Coord-Leader
// on h. Their keys are canonical already, and their values are shared by
// every answer until the leader changes (nodeHeaders): this runs for
// every request, and allocated for each before (issue 21). Sharing is
// safe because no one writes into a header's value slice: net/http and
// apiwire only read it, and Set, Add and Del replace the slice (each
// value slice has no room to append into).
func (a *API) setNodeHeaders(h http.Header) {
	self, leader := a.replica.Leader()
	v := a.nodeHeaders.Load()
	if v == nil || v.self != self || v.leader != leader {
		v = newNodeHeaderValues(self, leader)
		a.nodeHeaders.Store(v)
	}
	h[api.HeaderNode] = v.node
	if leader != 0 {
		h[api.HeaderLeader] = v.leaderValue
	} else {
		delete(h, api.HeaderLeader) // set again after an election (propose)
	}
}

// nodeHeaderValues are the values of Coord-Node and Coord-Leader for one
// node and leader, each a slice of one value with no room to append.
type nodeHeaderValues struct {
	self, leader      uint64
	node, leaderValue []string
}

func newNodeHeaderValues(self, leader uint64) *nodeHeaderValues {
	values := []string{strconv.FormatUint(self, 10), strconv.FormatUint(leader, 10)}
	return &nodeHeaderValues{self: self, leader: leader, node: values[0:1:1], leaderValue: values[1:2:2]}
}

// readBody reads the request's body, at most limit bytes. A small body
// whose length is declared is read into a buffer of that size (net/http
// stops it there): io.ReadAll would start at 512 bytes and grow, copying.
// A larger declared length is not taken on trust: memory grows with the
// bytes that arrive, not with what a client announces and never sends.
//
// A body that came whole in a wire frame (apiwire.MemoryBody) is taken as
// it is when it fits the limit: it is a copy already, and copying it again
// was one allocation per write on the leader (issue 21). One over the
// limit is read as any other, and refused alike.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	const trusted = 64 << 10 // declared lengths allocated up front
	if mb, ok := r.Body.(apiwire.MemoryBody); ok && r.ContentLength > 0 && r.ContentLength <= limit {
		if b := mb.TakeBytes(); int64(len(b)) == r.ContentLength {
			return b, nil
		}
		return nil, errors.New("apiwire: a request body's length differs from its ContentLength") // a bug: open sets both
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	switch n := r.ContentLength; {
	case n == 0:
		return []byte{}, nil
	case n > 0 && n <= limit && n <= trusted:
		buf := make([]byte, n)
		if _, err := io.ReadFull(body, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	return io.ReadAll(body)
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (a stream's
// write deadline).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// apiError is an error answered as it is: its body names the code (which
// gives the HTTP status) and any fields the code carries.
type apiError struct{ body api.ErrorResponse }

func (e *apiError) Error() string { return e.body.Error }

// fail returns an apiError with code and message.
func fail(code api.Code, msg string) *apiError {
	return &apiError{body: api.ErrorResponse{Code: code, Error: msg}}
}

// errorCode returns the code the API answers err with.
func errorCode(err error) api.Code {
	switch {
	case errors.Is(err, ErrInvalid):
		return api.CodeInvalid
	case errors.Is(err, ErrOutcomeUnknown):
		// Before the context errors: a write that timed out after it was
		// proposed may still apply.
		return api.CodeUnknownOutcome
	case errors.Is(err, ErrStorage) && vfs.IsNoSpace(err):
		return api.CodeDiskFull
	case errors.Is(err, ErrStorage):
		return api.CodeStorageFailed
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrStopped):
		return api.CodeUnavailable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return api.CodeTimeout
	}
	return api.CodeInternal
}

func (a *API) writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = fail(errorCode(err), err.Error())
	}
	if ae.body.Code.Retry() {
		w.Header().Set(api.HeaderRetryAfter, "1")
	}
	writeJSON(w, ae.body.Code.Status(), ae.body)
}

// contentTypeJSON is the Content-Type of every JSON answer, shared: net/http
// only reads a response's header values.
var contentTypeJSON = []string{"application/json"}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header()["Content-Type"] = contentTypeJSON
	w.WriteHeader(status)
	if wr, ok := v.(api.WriteResponse); ok {
		// The answer to every write: encoded by hand, as encoding/json
		// would (the test TestWriteResponseEncoding checks), without
		// its encoder's allocations and reflection.
		var buf [40]byte
		_, err := w.Write(appendWriteResponse(buf[:0], wr))
		return err
	}
	return json.NewEncoder(w).Encode(v)
}

// appendWriteResponse appends wr as json.Encoder.Encode writes it.
func appendWriteResponse(b []byte, wr api.WriteResponse) []byte {
	b = append(b, `{"revision":`...)
	b = strconv.AppendUint(b, wr.Revision, 10)
	return append(b, "}\n"...)
}

// leading reports whether this node is the leader; if not, the request
// must be forwarded.
func (a *API) leading() bool {
	self, leader := a.replica.Leader()
	return leader == self && self != 0
}

// forward sends the request to the leader and copies its answer back.
// A failure is "unavailable" only if the write provably did not reach any
// leader's log: not proposed here, and not (entirely) sent. Otherwise it
// is unknown_outcome.
func (a *API) forward(w http.ResponseWriter, r *request) error {
	st := a.replica.Status()
	if by := r.Header.Get(api.HeaderForwarded); by != "" {
		return a.forwardFailed(r, fmt.Sprintf("node %d is not the leader (request forwarded by node %s)", st.ID, by), st.Leader, false)
	}
	var target string
	for _, m := range st.Members {
		if m.ID == st.Leader && st.Leader != st.ID {
			target = m.HTTP
		}
	}
	if target == "" {
		return a.forwardFailed(r, fmt.Sprintf("node %d knows no leader to forward to (leader %d)", st.ID, st.Leader), st.Leader, false)
	}
	// Once the whole request is written the leader may act on it (it
	// reads the whole body before it proposes anything).
	var sent atomic.Bool
	ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) { sent.Store(info.Err == nil) },
	})
	scheme := a.cfg.ForwardScheme
	if scheme == "" {
		scheme = "http"
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, scheme+"://"+target+r.URL.RequestURI(), bytes.NewReader(r.body))
	if err != nil {
		return fmt.Errorf("server: forward: %w", err)
	}
	req.Header.Set(api.HeaderForwarded, strconv.FormatUint(st.ID, 10))
	// The leader checks the token again: a forwarding node vouches for
	// nothing.
	for _, h := range []string{"Content-Type", api.HeaderAuthorization} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	resp, err := a.cfg.Client.Do(req)
	if err != nil {
		a.cfg.Logger.Debug("forward to leader failed", "leader", st.Leader, "addr", target, "sent", sent.Load(), "err", err)
		return a.forwardFailed(r, fmt.Sprintf("forward to leader %d at %s: %v", st.Leader, target, err), st.Leader, sent.Load())
	}
	defer resp.Body.Close()
	// Coord-Node stays this node's: a client that sees it differ from
	// Coord-Leader knows its request was forwarded, and looks the leader up.
	for _, h := range []string{"Content-Type", api.HeaderRetryAfter, api.HeaderAuthenticate, api.HeaderLeader} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		copyFlushing(w, resp.Body)
		return nil
	}
	_, err = io.Copy(w, resp.Body)
	if err != nil {
		a.cfg.Logger.Debug("copy forwarded response", "err", err)
	}
	return nil
}

// forwardFailed is the answer to a request that could not be forwarded: a
// write that this node proposed, or that reached the leader, has an
// unknown outcome; anything else was not applied.
func (a *API) forwardFailed(r *request, msg string, leader uint64, sent bool) error {
	code := api.CodeUnavailable
	if r.Method != http.MethodGet && (r.proposed || sent) {
		if r.proposed {
			msg = "proposed here, then leadership was lost, and " + msg
		} else {
			msg += " (after the request was sent)"
		}
		code = api.CodeUnknownOutcome
	}
	ae := fail(code, msg)
	ae.body.Leader = new(leader)
	return ae
}

// copyFlushing relays an event stream, flushing after every read so that
// each event reaches the client when the leader sends it.
func copyFlushing(w http.ResponseWriter, r io.Reader) {
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush() // the headers, before the first event
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

// sessionParams reads the exactly-once parameters client_id, seq and ack.
func sessionParams(r *request) (client, seq, ack uint64, err error) {
	parse := func(name string) uint64 {
		s := r.param(name)
		if s == "" || err != nil {
			return 0
		}
		v, perr := strconv.ParseUint(s, 10, 64)
		if perr != nil {
			err = fmt.Errorf("%w: %s %q: want an unsigned integer", ErrInvalid, name, s)
		}
		return v
	}
	client, seq, ack = parse(api.ParamClientID), parse(api.ParamSeq), parse(api.ParamAck)
	if err == nil && client != 0 && seq == 0 {
		err = fmt.Errorf("%w: client_id without seq", ErrInvalid)
	}
	if err == nil && client == 0 && (seq != 0 || ack != 0) {
		err = fmt.Errorf("%w: seq or ack without client_id", ErrInvalid)
	}
	return client, seq, ack, err
}

// propose runs a write: locally on the leader, forwarded elsewhere. ok is
// called with the result of a command that applied; failures of the
// command itself become API errors.
func (a *API) propose(w http.ResponseWriter, r *request, cmd Command, ok func(Result) error) error {
	client, seq, ack, err := sessionParams(r)
	if err != nil {
		return err
	}
	cmd.Client, cmd.Seq, cmd.Ack = client, seq, ack
	if !a.leading() {
		// This node checked the token against tokens it applied as no
		// leader: they may lag a revocation a leader already answered.
		// Whatever path the write takes from here (held by a candidate,
		// proposed after an election this node wins, or forwarded), the
		// state machine checks it again at its entry.
		if err := a.carryToken(r, &cmd); err != nil {
			return err
		}
		// A candidate's write is held for the election's outcome
		// (campaign.go): proposed with the new leader's first entry if
		// it wins, or it waits and goes on as below.
		if e, can := a.replica.(electionProposer); can && cmd.Op != OpRenew {
			if res, proposed, err := e.ProposeAtElection(r.Context(), cmd); proposed {
				// The election ended meanwhile: name the leader it made,
				// not the one named when the write came (a client follows
				// Coord-Leader even on a success).
				a.setNodeHeaders(w.Header())
				return a.proposed(w, r, cmd, res, err, ok)
			}
		} else if e, can := a.replica.(electionAwaiter); can {
			e.AwaitElection(r.Context())
		}
	}
	if !a.leading() {
		return a.proposeFromFollower(w, r, cmd, ok)
	}
	res, err := a.replica.Propose(r.Context(), cmd)
	return a.proposed(w, r, cmd, res, err, ok)
}

// proposed answers a write this node proposed as the leader, with its
// result and error.
func (a *API) proposed(w http.ResponseWriter, r *request, cmd Command, res Result, err error, ok func(Result) error) error {
	// Refused before it reached the log: safe to pass on to the leader.
	// Appended but leadership lost: safe only for a write in a session,
	// which the leader recognizes as a retry.
	if errors.Is(err, ErrNotLeader) {
		return a.forward(w, r)
	}
	if errors.Is(err, ErrOutcomeUnknown) && cmd.Client != 0 && r.Context().Err() == nil {
		r.proposed = true
		return a.forward(w, r)
	}
	if err != nil {
		return err
	}
	if err := resultError(res); err != nil {
		return err
	}
	return ok(res)
}

// forwardsAsProposal reports whether a follower forwards a write of op to
// its leader as a Raft proposal. The others go over HTTP: a renewal, which
// the leader answers without a write (Node.renewOnLeader), and the tokens
// API's writes (admin requests, whose answers the leader makes).
func forwardsAsProposal(op Op) bool {
	switch op {
	case OpPut, OpDelete, OpAcquire, OpRelease, OpBatch:
		return true
	}
	return false
}

// carryToken puts the hash of the request's token in a write a follower
// forwards as a proposal, which the state machine re-checks
// (Machine.authorize): the follower checked the token against its own
// tokens, which may lag the leader's (a revocation already answered), so
// the decision is taken again at the write's position in the log, alike on
// every replica. A write this node took as the leader need not carry it:
// a revocation is answered once the leader applied it, so its check is
// never behind an answered one. One it took as no leader carries it
// whatever way it is proposed (API.propose).
func (a *API) carryToken(r *request, cmd *Command) error {
	if !a.cfg.Auth {
		return nil
	}
	secret, err := bearer(r.Request)
	if err != nil {
		return err
	}
	cmd.HasAuth, cmd.AuthHash = true, HashToken(secret)
	return nil
}

// proposeFromFollower runs a write a follower took: forwarded to the
// leader as a Raft proposal, the answer being this node's own Apply of the
// entry (ProposalForwarder), or, for what is not a plain proposal, a
// request forwarded to it by HTTP, or when the Raft transport has no
// connection to the leader, over HTTP.
func (a *API) proposeFromFollower(w http.ResponseWriter, r *request, cmd Command, ok func(Result) error) error {
	f, can := a.replica.(ProposalForwarder)
	if !can || !forwardsAsProposal(cmd.Op) || r.Header.Get(api.HeaderForwarded) != "" {
		return a.forward(w, r)
	}
	if err := a.carryToken(r, &cmd); err != nil {
		return err
	}
	res, err := f.ProposeForwarded(r.Context(), cmd)
	if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoPeerRoute) {
		// Refused before it left this node, or lost to another leader's
		// entry at its index: not applied, so HTTP forwarding answers
		// (unavailable, if no leader is known).
		return a.forward(w, r)
	}
	if refused, ok := errors.AsType[*ForwardRefusedError](err); ok {
		// Appended nowhere: unavailable, naming the node the refusing
		// one takes for the leader, in the body and in Coord-Leader, so
		// that the client retries there at once.
		ae := fail(api.CodeUnavailable, refused.Error())
		ae.body.Leader = new(refused.Lead)
		if refused.Lead != 0 {
			w.Header().Set(api.HeaderLeader, strconv.FormatUint(refused.Lead, 10))
		} else {
			w.Header().Del(api.HeaderLeader)
		}
		return ae
	}
	if err != nil {
		return err
	}
	if err := resultError(res); err != nil {
		return err
	}
	return ok(res)
}

// resultError turns a failed command into an API error.
func resultError(res Result) error {
	var ae *apiError
	switch res.Status {
	case StatusOK:
		return nil
	case StatusNotFound:
		ae = fail(api.CodeNotFound, "key not found")
	case StatusConflict:
		ae = fail(api.CodeConflict, "revision mismatch")
		ae.body.Revision = new(res.Revision)
	case StatusHeld:
		ae = fail(api.CodeHeld, "lease held by "+res.Holder)
		ae.body.Holder, ae.body.Token = new(res.Holder), new(res.Token)
	case StatusLost:
		ae = fail(api.CodeLost, "token is not current")
		ae.body.Holder, ae.body.Token = new(res.Holder), new(res.Token)
	case StatusStaleSequence:
		ae = fail(api.CodeStaleSequence, res.Reason)
	case StatusUnauthenticated:
		ae = unauthenticated(res.Reason)
	case StatusForbidden:
		ae = fail(api.CodePermissionDenied, res.Reason)
	default:
		ae = fail(api.CodeInvalid, res.Reason)
	}
	if res.Key != "" { // a failed batch: the key of the op that failed
		ae.body.Key, ae.body.Error = res.Key, res.Reason
	}
	return ae
}

// read runs a read: stale reads locally, linearizable ones locally too,
// on the leader or a follower, after a ReadIndex barrier (a follower asks
// the leader for the read index over the peer transport and applies
// through it). A node that cannot get a read index (it knows no leader,
// or its leader changed or refused) forwards the request as before: to the
// leader, or an unavailable answer naming why.
//
// Lease reads are the exception (leaderReadRoutes): a follower forwards
// them, because their remaining_ms is the leader's clock.
//
// The token is checked again after the barrier, against the state it
// applied: a revocation committed before the read began is applied by then,
// so a revoked token reads nothing, on any node (the guard's check before
// the barrier saw this node's state as it was).
func (a *API) read(w http.ResponseWriter, r *request, serve func() error) error {
	stale, err := boolParam(r, api.ParamStale)
	if err != nil {
		return err
	}
	if stale {
		return serve()
	}
	if leaderReadRoutes[r.route] && !a.leading() {
		a.countRead("forwarded")
		return a.forward(w, r)
	}
	if err := a.replica.ReadBarrier(r.Context()); err != nil {
		if errors.Is(err, ErrNotLeader) {
			a.countRead("forwarded")
			return a.forward(w, r)
		}
		if r.Context().Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			st := a.replica.Status()
			return fmt.Errorf("%w: node %d got no read index from leader %d in time: %v", ErrNotLeader, st.ID, st.Leader, err)
		}
		return err
	}
	if refusal := a.recheckToken(r); refusal != nil {
		a.writeRefusal(w, refusal)
		return nil
	}
	a.countRead("local")
	return serve()
}

// leaderReadRoutes are the linearizable reads a follower forwards to the
// leader rather than serve itself: a held lease's remaining_ms is the time
// left by the leader's clock, which only the leader knows (it answers
// renewals itself, without a Raft write: Node.renewOnLeader), and
// clients (raft:// standbys) time their takeover by it. A follower could
// only leave it out.
var leaderReadRoutes = map[string]bool{"lease_get": true, "lease_watch": true}

func (a *API) countRead(served string) {
	if a.cfg.Metrics != nil {
		a.cfg.Metrics.linearizableReads.WithLabelValues(served).Inc()
	}
}

func boolParam(r *request, name string) (bool, error) {
	s := r.param(name)
	if s == "" {
		return false, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%w: %s %q: want true or false", ErrInvalid, name, s)
	}
	return v, nil
}

func uintParam(r *request, name string) (uint64, bool, error) {
	s := r.param(name)
	if s == "" {
		return 0, false, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %s %q: want an unsigned integer", ErrInvalid, name, s)
	}
	return v, true, nil
}

func (a *API) status(w http.ResponseWriter, _ *request) error {
	return writeJSON(w, http.StatusOK, a.replica.Status())
}

func (a *API) members(w http.ResponseWriter, _ *request) error {
	return writeJSON(w, http.StatusOK, api.MembersResponse{Members: a.replica.Status().Members})
}

func keyResponse(kv KeyValue) api.KeyResponse {
	resp := api.KeyResponse{Key: kv.Key, Revision: kv.Revision, CreateRevision: kv.CreateRevision, Version: kv.Version}
	if utf8.Valid(kv.Value) {
		resp.Value = string(kv.Value)
	} else {
		resp.ValueBase64 = base64.StdEncoding.EncodeToString(kv.Value)
	}
	return resp
}

// keyBody returns the answer about a key: 200 and the key, or 404 with
// revision 0 when it does not exist.
func (a *API) keyBody(key string) (int, any) {
	var kv KeyValue
	var ok bool
	a.replica.View(func(v View) { kv, ok = v.Get(key) })
	if !ok {
		return http.StatusNotFound, api.ErrorResponse{Error: "key not found", Code: api.CodeNotFound, Key: key, Revision: new(uint64(0))}
	}
	return http.StatusOK, keyResponse(kv)
}

func (a *API) getKey(w http.ResponseWriter, r *request) error {
	key := r.PathValue("key")
	if err := checkName("key", key); err != nil {
		return err
	}
	return a.read(w, r, func() error { return respond(w, func() (int, any) { return a.keyBody(key) }) })
}

// respond writes what body returns: a status and a JSON value.
func respond(w http.ResponseWriter, body func() (int, any)) error {
	status, b := body()
	return writeJSON(w, status, b)
}

// condition reads prev_revision into a command.
func condition(r *request, cmd *Command) error {
	prev, has, err := uintParam(r, api.ParamPrevRevision)
	cmd.HasPrev, cmd.PrevRevision = has, prev
	return err
}

func (a *API) putKey(w http.ResponseWriter, r *request) error {
	cmd := Command{Op: OpPut, Key: r.PathValue("key"), Value: r.body}
	if err := checkName("key", cmd.Key); err != nil {
		return err
	}
	if err := condition(r, &cmd); err != nil {
		return err
	}
	return a.propose(w, r, cmd, func(res Result) error {
		return writeJSON(w, http.StatusOK, api.WriteResponse{Revision: res.Revision})
	})
}

func (a *API) deleteKey(w http.ResponseWriter, r *request) error {
	cmd := Command{Op: OpDelete, Key: r.PathValue("key")}
	if err := checkName("key", cmd.Key); err != nil {
		return err
	}
	if err := condition(r, &cmd); err != nil {
		return err
	}
	return a.propose(w, r, cmd, func(res Result) error {
		return writeJSON(w, http.StatusOK, api.WriteResponse{Revision: res.Revision})
	})
}

// watch waits, up to timeout_ms, until current() differs from the revision
// parameter, then answers with body(). The first look is linearizable
// unless stale. With stream=true it answers at once with a stream of
// server-sent events instead, one per change, until the client goes away.
func (a *API) watch(w http.ResponseWriter, r *request, what Watched, current func() uint64, body func() (int, any)) error {
	rev, _, err := uintParam(r, api.ParamRevision)
	if err != nil {
		return err
	}
	timeoutMs, has, err := uintParam(r, api.ParamTimeoutMs)
	if err != nil {
		return err
	}
	stream, err := boolParam(r, api.ParamStream)
	if err != nil {
		return err
	}
	timeout := watchTimeout(timeoutMs, has)
	release, err := a.admitWatch(w)
	if err != nil {
		return err
	}
	defer release()
	if stream {
		return a.read(w, r, func() error { return a.stream(w, r, what, rev, current, body) })
	}
	return a.read(w, r, func() error {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		for {
			changed := a.replica.ChangedOf(what)
			if current() != rev {
				return respond(w, body)
			}
			select {
			case <-changed:
			case <-ctx.Done():
				if r.Context().Err() != nil {
					return r.Context().Err()
				}
				return respond(w, body) // timed out: the state as it is
			}
		}
	})
}

// streamKeepAlive is how often an idle event stream sends a comment, so
// that proxies and clients see the connection alive.
const streamKeepAlive = 15 * time.Second

// stream sends an event ("change", the same JSON as the long poll) each
// time current() moves away from the last revision sent, starting from rev.
//
// A stream never holds a lock while it writes, and each write has a
// deadline (StreamWriteTimeout): a client that stops reading blocks only
// its own stream, and only until the deadline, when the stream ends and
// frees its connection and its place under WatchesMax. A slow client that
// does read misses nothing it is owed: each write sends the latest state,
// not a queue of states (docs/API.md).
func (a *API) stream(w http.ResponseWriter, r *request, what Watched, rev uint64, current func() uint64, body func() (int, any)) error {
	flusher, ok := w.(http.Flusher)
	if !ok {
		return fmt.Errorf("server: streaming unsupported by this connection")
	}
	rc := http.NewResponseController(w)
	// send writes b and flushes it within the write timeout. A connection
	// that takes no deadline (a test recorder) is written without one.
	send := func(b []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(a.cfg.StreamWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return err
		}
		flusher.Flush()
		// Flush reports no error; a write that failed at the deadline
		// shows in the next one, or the client's end shows in the context.
		return r.Context().Err()
	}
	// net/http sets no write deadline of its own between requests (the
	// server has no WriteTimeout): lift ours for whatever follows on the
	// connection.
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_ = rc.SetWriteDeadline(time.Now().Add(a.cfg.StreamWriteTimeout))
	flusher.Flush()
	keepAlive := time.NewTicker(streamKeepAlive)
	defer keepAlive.Stop()
	for {
		changed := a.replica.ChangedOf(what)
		if cur := current(); cur != rev {
			rev = cur
			frame, ok := a.frames.get(what, rev)
			if !ok {
				_, b := body()
				data, err := json.Marshal(b)
				if err != nil {
					return nil
				}
				frame = fmt.Appendf(nil, "event: %s\nid: %d\ndata: %s\n\n", api.EventChange, rev, data)
				a.frames.put(what, rev, frame)
			}
			if err := send(frame); err != nil {
				return nil // the client went away, or stopped reading
			}
		}
		select {
		case <-changed:
		case <-keepAlive.C:
			if err := send([]byte(": keep-alive\n\n")); err != nil {
				return nil
			}
		case <-r.Context().Done():
			return nil
		}
	}
}

func (a *API) watchKey(w http.ResponseWriter, r *request) error {
	key := r.PathValue("key")
	if err := checkName("key", key); err != nil {
		return err
	}
	current := func() (rev uint64) {
		a.replica.View(func(v View) {
			kv, _ := v.Get(key)
			rev = kv.Revision
		})
		return rev
	}
	return a.watch(w, r, Watched{Name: key}, current, func() (int, any) { return a.keyBody(key) })
}

// decodeStrict decodes body, which must be one JSON value for v and
// nothing after it, into v, refusing text JSON would not carry as it is
// (checkJSONText) and fields v does not have: a request the API would
// otherwise half understand is ErrInvalid, naming what.
func decodeStrict(body []byte, what string, v any) error {
	if err := checkJSONText(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, what, err)
	}
	// More would miss a stray '}' or ']', which it takes for the end of
	// a value; the next token must be the end of the body.
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: %s: data after the JSON object", ErrInvalid, what)
	}
	return nil
}

func leaseRequest(r *request) (api.LeaseRequest, error) {
	var lr api.LeaseRequest
	if err := decodeStrict(r.body, "lease request body", &lr); err != nil {
		return lr, err
	}
	if lr.Holder == "" {
		return lr, fmt.Errorf("%w: holder is required", ErrInvalid)
	}
	return lr, nil
}

func (a *API) leaseOp(w http.ResponseWriter, r *request, op Op) error {
	name := r.PathValue("name")
	if err := checkName("lease name", name); err != nil {
		return err
	}
	lr, err := leaseRequest(r)
	if err != nil {
		return err
	}
	ttl, err := ttlFromMs(lr.TTLMs, a.cfg.Limits.TTLMax)
	if err != nil {
		return err
	}
	if op == OpAcquire && lr.TTLMs == 0 {
		return fmt.Errorf("%w: ttl_ms is required", ErrInvalid)
	}
	if op != OpAcquire && lr.Token == 0 {
		return fmt.Errorf("%w: token is required", ErrInvalid)
	}
	cmd := Command{Op: op, Key: name, Holder: lr.Holder, Token: lr.Token, TTL: ttl}
	return a.propose(w, r, cmd, func(res Result) error {
		return writeJSON(w, http.StatusOK, api.LeaseResponse{Name: cmd.Key, Holder: res.Holder, Token: res.Token,
			TTLMs: res.TTL.Milliseconds(), Revision: res.Revision})
	})
}

func (a *API) acquire(w http.ResponseWriter, r *request) error { return a.leaseOp(w, r, OpAcquire) }
func (a *API) renew(w http.ResponseWriter, r *request) error   { return a.leaseOp(w, r, OpRenew) }
func (a *API) release(w http.ResponseWriter, r *request) error { return a.leaseOp(w, r, OpRelease) }

func (a *API) leaseBody(name string) (int, any) {
	var resp api.LeaseResponse
	a.replica.View(func(v View) {
		l := v.Lease(name)
		resp = api.LeaseResponse{Name: name, Holder: l.Holder, Token: l.Token, TTLMs: l.TTL.Milliseconds(), Revision: l.Revision}
		if left, leader := v.Remaining(name); leader && l.Held() {
			ms := left.Milliseconds()
			resp.RemainingMs = &ms
		}
	})
	return http.StatusOK, resp
}

func (a *API) getLease(w http.ResponseWriter, r *request) error {
	name := r.PathValue("name")
	if err := checkName("lease name", name); err != nil {
		return err
	}
	return a.read(w, r, func() error { return respond(w, func() (int, any) { return a.leaseBody(name) }) })
}

func (a *API) watchLease(w http.ResponseWriter, r *request) error {
	name := r.PathValue("name")
	if err := checkName("lease name", name); err != nil {
		return err
	}
	current := func() (rev uint64) {
		a.replica.View(func(v View) { rev = v.Lease(name).Revision })
		return rev
	}
	return a.watch(w, r, Watched{Lease: true, Name: name}, current, func() (int, any) { return a.leaseBody(name) })
}

func (a *API) addMember(w http.ResponseWriter, r *request) error {
	if !a.leading() {
		return a.forward(w, r)
	}
	var mr api.MemberRequest
	if err := decodeStrict(r.body, "member request body", &mr); err != nil {
		return err
	}
	if mr.ID == 0 || mr.Peer == "" {
		return fmt.Errorf("%w: id and peer are required", ErrInvalid)
	}
	if err := a.replica.AddMember(r.Context(), mr.ID, mr.Peer); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.MembersResponse{Members: a.replica.Status().Members})
}

func (a *API) removeMember(w http.ResponseWriter, r *request) error {
	if !a.leading() {
		return a.forward(w, r)
	}
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		return fmt.Errorf("%w: member id %q", ErrInvalid, r.PathValue("id"))
	}
	if err := a.replica.RemoveMember(r.Context(), id); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.MembersResponse{Members: a.replica.Status().Members})
}

package apiwire

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// TransportConfig configures a Transport.
type TransportConfig struct {
	// TLS is the configuration of connections to https:// URLs (nil: the
	// system's roots). The transport offers ALPN only, whatever
	// NextProtos says.
	TLS *tls.Config
	// DialTimeout bounds a dial and its TLS handshake (0: 10 s).
	DialTimeout time.Duration
	// Limits bound what a server may send (DefaultLimits if zero); the
	// transport keeps at most StreamsMax requests in flight per
	// connection, the rest wait.
	Limits Limits
	// Fallback, if set, sends the requests to a server that does not
	// speak wire (a coord node run with --wire=false, or one older than
	// wire), found out when a connection to it is made: over TLS the
	// transport offers "http/1.1" after ALPN, and a server that chooses
	// it (or no protocol) does not speak wire; in plain mode a server that
	// answers the preface with an HTTP status line (net/http's 400 for a
	// request line it cannot parse: it read no further) does not either.
	// Either way the requests meant for that connection go over Fallback
	// instead (none of them reached a handler), and so do the host's
	// requests for FallbackFor, after which the transport tries wire
	// again. An http.Transport fallback whose DialTLSContext is
	// DialFallbackTLS serves its first request over the connection that
	// found out, with no second TLS handshake. Nil: over TLS the
	// transport offers ALPN alone, and a server that does not speak wire
	// fails the handshake; in plain mode it fails the requests with
	// ErrNotWire.
	Fallback http.RoundTripper
	// FallbackFor is how long a host found not to speak wire is sent its
	// requests over Fallback before a new connection tries wire again (0:
	// one minute).
	FallbackFor time.Duration
}

// ErrNotWire is wrapped by the error of a request sent to a server that
// does not speak wire (TransportConfig.Fallback). The request had no
// effect.
var ErrNotWire = errors.New("apiwire: the server does not speak " + ALPN)

// httpStatusLine is how an HTTP/1 server's answer opens: the first bytes
// a plain server that does not speak wire sends back to the preface. A
// frame never opens so: as a length, these bytes are over 1 GiB.
const httpStatusLine = "HTTP/"

// Transport is an http.RoundTripper that sends requests over one wire
// connection per host (scheme and address), dialed on first use and
// again after it breaks, and over TransportConfig.Fallback to a host that
// does not speak wire. A broken connection fails the requests in flight
// on it with an error that wraps the cause (not a dial error: the server
// may have read them); a failed dial, or a request whose context ended
// while its connection was being dialed, returns a *net.OpError of Op
// "dial": nothing of it was sent.
//
// Transport is safe for concurrent use.
type Transport struct {
	cfg   TransportConfig
	mu    sync.Mutex
	conns map[string]*clientConn
	// plainHTTP maps a host (scheme and address) found not to speak wire
	// to when to try wire again (TransportConfig.Fallback).
	plainHTTP map[string]time.Time
	// spares are TLS connections, by address, whose handshake chose
	// HTTP/1.1, for the fallback to take (DialFallbackTLS).
	spares map[string][]*tls.Conn
}

// NewTransport returns a transport configured by cfg.
func NewTransport(cfg TransportConfig) *Transport {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits()
	}
	if cfg.FallbackFor <= 0 {
		cfg.FallbackFor = time.Minute
	}
	return &Transport{cfg: cfg, conns: map[string]*clientConn{}, plainHTTP: map[string]time.Time{}, spares: map[string][]*tls.Conn{}}
}

// RoundTrip sends req over the connection to its host and returns the
// answer as soon as its head arrives (the request's httptrace
// WroteRequest hook, if any, runs once its frame is written); the body streams as data frames
// come. The request's context ending (before or after the head) cancels
// it on the server. The body is read whole before sending and must fit a
// frame (Limits.FrameBytesMax with the headers).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return nil, fmt.Errorf("apiwire: unsupported scheme %q", req.URL.Scheme)
	}
	key := req.URL.Scheme + "://" + req.URL.Host
	if t.cfg.Fallback != nil && t.speaksHTTP(key) {
		return t.cfg.Fallback.RoundTrip(req)
	}
	body, err := readRequestBody(req, t.cfg.Limits.FrameBytesMax)
	if err != nil {
		return nil, err
	}
	resp, err := t.roundTrip(req, body)
	if t.cfg.Fallback != nil && errors.Is(err, ErrNotWire) {
		t.fellBack(key)
		return t.cfg.Fallback.RoundTrip(withBody(req, body))
	}
	return resp, err
}

// speaksHTTP reports whether requests to key go over the fallback.
func (t *Transport) speaksHTTP(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	until, ok := t.plainHTTP[key]
	if ok && !time.Now().Before(until) {
		delete(t.plainHTTP, key) // try wire again
		return false
	}
	return ok
}

// fellBack records that key does not speak wire.
func (t *Transport) fellBack(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.plainHTTP[key]; !ok {
		t.plainHTTP[key] = time.Now().Add(t.cfg.FallbackFor)
	}
}

// withBody returns req with its body, already read, to be read again.
func withBody(req *http.Request, body []byte) *http.Request {
	r := req.Clone(req.Context())
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) {
		if len(body) == 0 {
			return http.NoBody, nil
		}
		return io.NopCloser(bytes.NewReader(body)), nil
	}
	r.Body, _ = r.GetBody()
	return r
}

// roundTrip sends req, its body read, over wire.
func (t *Transport) roundTrip(req *http.Request, body []byte) (*http.Response, error) {
	ctx := req.Context()
	cc, err := t.conn(ctx, req.URL.Scheme, req.URL.Host)
	if err != nil {
		return nil, err
	}
	select {
	case cc.slots <- struct{}{}:
	case <-ctx.Done():
		t.leave(cc)
		return nil, ctx.Err()
	case <-cc.dead:
		t.leave(cc)
		return nil, cc.failure()
	}
	st, err := cc.open(req, body)
	t.leave(cc)
	if err != nil {
		<-cc.slots
		return nil, err
	}
	if testHookOpened != nil {
		testHookOpened(st.done)
	}
	answer := func(h head) *http.Response {
		return &http.Response{
			Status: statusText(h.status), StatusCode: h.status,
			Proto: "COORD-WIRE/1", ProtoMajor: 1, ProtoMinor: 1,
			Header: h.header, ContentLength: -1, Request: req,
			Body: &responseBody{cc: cc, st: st, ctx: ctx},
		}
	}
	select {
	case h := <-st.head:
		return answer(h), nil
	case <-st.done:
		// A short answer's head and end may both have come before this
		// select, which then picks either: the head, if it came, wins.
		select {
		case h := <-st.head:
			return answer(h), nil
		default:
			return nil, st.err
		}
	case <-ctx.Done():
		cc.cancel(st)
		return nil, ctx.Err()
	}
}

// testHookOpened, if set, runs once a RoundTrip's stream is open, with
// the channel its end closes (tests).
var testHookOpened func(done <-chan struct{})

// CloseIdleConnections closes every connection with no request in
// flight, the fallback's included.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	var idle []*clientConn
	for key, cc := range t.conns {
		select {
		case <-cc.ready:
		default:
			continue // still dialing: dial sets its fields, and a caller waits for it
		}
		cc.mu.Lock()
		if cc.conn != nil && len(cc.streams) == 0 && cc.callers == 0 {
			idle = append(idle, cc)
			delete(t.conns, key)
		}
		cc.mu.Unlock()
	}
	t.mu.Unlock()
	for _, cc := range idle {
		cc.fail(errors.New("apiwire: connection closed as idle"))
	}
	t.mu.Lock()
	spares := t.spares
	t.spares = map[string][]*tls.Conn{}
	t.mu.Unlock()
	for _, cs := range spares {
		for _, c := range cs {
			c.Close()
		}
	}
	if f, ok := t.cfg.Fallback.(interface{ CloseIdleConnections() }); ok {
		f.CloseIdleConnections()
	}
}

func readRequestBody(req *http.Request, limit int) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer req.Body.Close()
	body, err := io.ReadAll(io.LimitReader(req.Body, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("apiwire: read request body: %w", err)
	}
	if len(body) > limit {
		return nil, fmt.Errorf("apiwire: request body over the frame limit of %d bytes", limit)
	}
	return body, nil
}

// conn returns the live connection to scheme://host, dialing one if there
// is none.
func (t *Transport) conn(ctx context.Context, scheme, host string) (*clientConn, error) {
	key := scheme + "://" + host
	t.mu.Lock()
	cc := t.conns[key]
	if cc == nil {
		cc = newClientConn(t.cfg.Limits)
		t.conns[key] = cc
		go t.dial(cc, key, scheme, host)
	}
	cc.callers++
	t.mu.Unlock()
	select {
	case <-cc.ready:
	case <-ctx.Done():
		t.leave(cc)
		// As a failed dial: nothing of the request was sent.
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: ctx.Err()}
	}
	if cc.dialErr != nil {
		t.leave(cc)
		return nil, cc.dialErr
	}
	return cc, nil
}

// leave ends a caller's claim on cc (conn) once its stream is open, or
// it gave up before: CloseIdleConnections leaves a connection alone while
// a caller is between the two.
func (t *Transport) leave(cc *clientConn) {
	t.mu.Lock()
	cc.callers--
	t.mu.Unlock()
}

// dial makes cc's connection and starts its goroutines, or records why it
// could not; a failed or broken connection leaves the map so that the
// next request dials again.
func (t *Transport) dial(cc *clientConn, key, scheme, host string) {
	conn, err := t.dialConn(scheme, host)
	forget := func() {
		t.mu.Lock()
		if t.conns[key] == cc {
			delete(t.conns, key)
		}
		t.mu.Unlock()
	}
	if err != nil {
		forget()
		cc.dialErr = err
		close(cc.ready)
		return
	}
	cc.conn = conn
	cc.forget = forget
	if scheme == "http" {
		cc.out = append(cc.out, Preface...)
		cc.unconfirmed.Store(true)
	}
	close(cc.ready)
	go cc.writeLoop()
	go cc.readLoop()
}

func (t *Transport) dialConn(scheme, host string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.DialTimeout)
	defer cancel()
	if scheme == "http" {
		d := net.Dialer{KeepAlive: 30 * time.Second}
		return d.DialContext(ctx, "tcp", host)
	}
	protos := []string{ALPN}
	if t.cfg.Fallback != nil {
		protos = append(protos, "http/1.1")
	}
	tc, err := t.dialTLS(ctx, host, protos)
	if err != nil {
		return nil, err
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != ALPN {
		err := &net.OpError{Op: "dial", Net: "tcp", Addr: tc.RemoteAddr(), Err: fmt.Errorf("%w: server at %s: ALPN chose %q", ErrNotWire, host, p)}
		if t.cfg.Fallback == nil {
			tc.Close()
			return nil, err
		}
		t.spare(host, tc) // HTTP/1.1 agreed: the fallback's to use (DialFallbackTLS)
		return nil, err
	}
	return tc, nil
}

// dialTLS dials host and completes a TLS handshake offering protos.
func (t *Transport) dialTLS(ctx context.Context, host string, protos []string) (*tls.Conn, error) {
	d := net.Dialer{KeepAlive: 30 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	conf := &tls.Config{}
	if t.cfg.TLS != nil {
		conf = t.cfg.TLS.Clone()
	}
	conf.NextProtos = protos
	if conf.ServerName == "" {
		conf.ServerName, _, _ = net.SplitHostPort(host)
	}
	tc := tls.Client(raw, conf)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: raw.RemoteAddr(), Err: err}
	}
	return tc, nil
}

// spareFor is how long a TLS connection whose handshake chose HTTP/1.1
// waits for the fallback to take it (DialFallbackTLS) before it is
// closed: the fallback dials at once, unless it had a connection already.
const spareFor = 10 * time.Second

// spare keeps c, a TLS connection to host that agreed on HTTP/1.1, for
// the fallback's next dial to host.
func (t *Transport) spare(host string, c *tls.Conn) {
	t.mu.Lock()
	t.spares[host] = append(t.spares[host], c)
	t.mu.Unlock()
	time.AfterFunc(spareFor, func() {
		if t.takeSpare(host, c) != nil {
			c.Close()
		}
	})
}

// takeSpare removes a spare connection to host, want if not nil, and
// returns it, or nil if there is none.
func (t *Transport) takeSpare(host string, want *tls.Conn) *tls.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, c := range t.spares[host] {
		if want == nil || c == want {
			t.spares[host] = append(t.spares[host][:i], t.spares[host][i+1:]...)
			if len(t.spares[host]) == 0 {
				delete(t.spares, host)
			}
			return c
		}
	}
	return nil
}

// DialFallbackTLS is for the DialTLSContext of an http.Transport that is
// the fallback (TransportConfig.Fallback): it returns the connection to
// addr whose TLS handshake, made to try wire, chose HTTP/1.1, so that the
// fallback's first request to a server that does not speak wire costs no
// second handshake. Without one it dials addr and completes a handshake
// offering "http/1.1", with TransportConfig's TLS and DialTimeout (the
// http.Transport's TLSClientConfig and TLSHandshakeTimeout are not used
// with DialTLSContext).
func (t *Transport) DialFallbackTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	if c := t.takeSpare(addr, nil); c != nil {
		return c, nil
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	defer cancel()
	return t.dialTLS(ctx, addr, []string{"http/1.1"})
}

// unconfirmedReadMax bounds the wait for a server's answer on a plain
// connection that broke before its first frame arrived.
const unconfirmedReadMax = 5 * time.Second

// clientConn is one connection to a server. Its reader and writer
// goroutines and the RoundTrips share it under mu; a goroutine that holds
// the transport's mu may take a connection's, never the other way round.
type clientConn struct {
	limits  Limits
	ready   chan struct{} // closed once dialed (conn set) or failed (dialErr set)
	dialErr error
	conn    net.Conn
	forget  func()        // takes the connection out of the transport's map
	slots   chan struct{} // one per request in flight
	dead    chan struct{} // closed when the connection fails
	callers int           // RoundTrips given it that have not yet opened their stream; guarded by Transport.mu
	// unconfirmed is true on a plain connection until its first frame
	// arrives: until then the server may turn out not to speak wire.
	unconfirmed atomic.Bool

	mu      sync.Mutex
	cond    *sync.Cond
	out     []byte
	wrote   []func(httptrace.WroteRequestInfo) // the WroteRequest hooks of the requests in out
	err     error                              // why the connection failed; nil while it works
	streams map[uint32]*clientStream
	next    uint32
}

func newClientConn(l Limits) *clientConn {
	cc := &clientConn{limits: l, ready: make(chan struct{}), slots: make(chan struct{}, l.StreamsMax),
		dead: make(chan struct{}), streams: map[uint32]*clientStream{}, next: 1}
	cc.cond = sync.NewCond(&cc.mu)
	return cc
}

// streamsMaxPerConn is the stream numbers a connection uses before the
// transport dials another (numbers are odd and never reused).
const streamsMaxPerConn = 1<<31 - 1

// open sends req on a new stream.
func (cc *clientConn) open(req *http.Request, body []byte) (*clientStream, error) {
	target := req.URL.RequestURI()
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.err != nil {
		return nil, cc.err
	}
	id := cc.next
	out, err := appendRequest(cc.out, id, req.Method, target, req.Header, body, cc.limits)
	if err != nil {
		return nil, err
	}
	cc.next += 2
	if cc.next >= streamsMaxPerConn {
		// This one finishes its streams; the next request dials. Not
		// under mu: the transport's lock comes before it.
		go cc.forget()
	}
	cc.out = out
	if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.WroteRequest != nil {
		cc.wrote = append(cc.wrote, trace.WroteRequest)
	}
	st := &clientStream{id: id, head: make(chan head, 1), done: make(chan struct{}), notify: make(chan struct{}, 1)}
	cc.streams[id] = st
	cc.cond.Broadcast()
	return st, nil
}

// cancel tells the server to stop serving st, and forgets it.
func (cc *clientConn) cancel(st *clientStream) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.streams[st.id] != st {
		return
	}
	delete(cc.streams, st.id)
	<-cc.slots
	st.finish(context.Canceled)
	if cc.err == nil {
		cc.out = appendFrame(cc.out, FrameCancel, st.id, nil)
		cc.cond.Broadcast()
	}
}

// failure returns why the connection failed.
func (cc *clientConn) failure() error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.err
}

// fail closes the connection and fails every stream in flight with err.
func (cc *clientConn) fail(err error) {
	// First, and not under mu (the transport's lock comes before it): a
	// request made once this one has failed dials again.
	cc.forget()
	cc.mu.Lock()
	if cc.err != nil {
		cc.mu.Unlock()
		return
	}
	cc.err = fmt.Errorf("apiwire: connection to %s: %w", cc.conn.RemoteAddr(), err)
	streams := cc.streams
	cc.streams = map[uint32]*clientStream{}
	close(cc.dead)
	cc.cond.Broadcast()
	for _, st := range streams {
		st.finish(cc.err)
		<-cc.slots
	}
	cc.mu.Unlock()
	cc.conn.Close()
}

func (cc *clientConn) writeLoop() {
	var spare []byte
	for {
		cc.mu.Lock()
		for len(cc.out) == 0 && cc.err == nil {
			cc.cond.Wait()
		}
		if cc.err != nil {
			cc.mu.Unlock()
			return
		}
		batch, wrote := cc.out, cc.wrote
		cc.out, cc.wrote = spare[:0], nil
		cc.mu.Unlock()
		if _, err := cc.conn.Write(batch); err != nil {
			if cc.unconfirmed.Load() {
				// A server that does not speak wire answers the preface
				// and closes, and this write may meet the reset; its
				// answer, still to be read, says what happened (readLoop),
				// which this error would hide. The reader ends soon: the
				// connection is broken.
				cc.conn.SetReadDeadline(time.Now().Add(unconfirmedReadMax))
				return
			}
			cc.fail(err)
			return
		}
		for _, hook := range wrote {
			hook(httptrace.WroteRequestInfo{})
		}
		spare = batch
		if cap(spare) > 1<<20 {
			spare = nil
		}
	}
}

func (cc *clientConn) readLoop() {
	r := bufio.NewReaderSize(cc.conn, 64<<10)
	if cc.unconfirmed.Load() {
		if b, err := r.Peek(len(httpStatusLine)); err == nil && string(b) == httpStatusLine {
			b, _ = r.Peek(r.Buffered())
			line, _, _ := strings.Cut(string(b), "\r\n")
			cc.fail(fmt.Errorf("%w: it answered the preface with %q", ErrNotWire, clip(line)))
			return
		}
	}
	var buf []byte
	for {
		f, next, err := ReadFrame(r, buf, cc.limits.FrameBytesMax)
		buf = next
		if err == nil {
			cc.unconfirmed.Store(false)
			err = cc.dispatch(f)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the server closed it: not a clean end to callers
			}
			cc.fail(err)
			return
		}
	}
}

// dispatch hands frame f to its stream. Frames of a stream the client
// cancelled are dropped.
func (cc *clientConn) dispatch(f Frame) error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	st := cc.streams[f.Stream]
	if st == nil {
		if f.Stream%2 == 0 || f.Stream >= cc.next {
			return fmt.Errorf("%w: frame type %d on stream %d, never opened", ErrMalformed, f.Type, f.Stream)
		}
		return nil
	}
	switch f.Type {
	case FrameHead:
		if st.headed {
			return fmt.Errorf("%w: second head on stream %d", ErrMalformed, f.Stream)
		}
		status, h, err := decodeHead(f.Payload, cc.limits)
		if err != nil {
			return err
		}
		st.headed = true
		st.head <- head{status, h}
	case FrameData:
		if !st.headed {
			return fmt.Errorf("%w: data before the head on stream %d", ErrMalformed, f.Stream)
		}
		st.push(append([]byte(nil), f.Payload...))
	case FrameEnd, FrameRefuse, FrameAbort:
		var err error = io.EOF
		switch {
		case f.Type == FrameRefuse:
			err = fmt.Errorf("%w: %q", ErrRefused, clip(string(f.Payload)))
		case f.Type == FrameAbort:
			err = fmt.Errorf("apiwire: the server lost the answer after serving the request: %q", clip(string(f.Payload)))
		case !st.headed:
			return fmt.Errorf("%w: end before the head on stream %d", ErrMalformed, f.Stream)
		}
		delete(cc.streams, f.Stream)
		<-cc.slots
		st.finish(err)
	default:
		return fmt.Errorf("%w: a server sent frame type %d", ErrMalformed, f.Type)
	}
	return nil
}

type head struct {
	status int
	header http.Header
}

// clientStream is one request in flight. Its connection's reader fills
// it (under the connection's mutex); its RoundTrip and body read it.
type clientStream struct {
	id     uint32
	headed bool      // guarded by the connection's mutex
	head   chan head // the head, once
	done   chan struct{}
	notify chan struct{} // a token when data or the end arrives

	mu   sync.Mutex
	data [][]byte
	err  error // io.EOF at the end; set before done closes
	over bool
}

func (st *clientStream) push(p []byte) {
	st.mu.Lock()
	st.data = append(st.data, p)
	st.mu.Unlock()
	st.wake()
}

func (st *clientStream) finish(err error) {
	st.mu.Lock()
	if st.over {
		st.mu.Unlock()
		return
	}
	st.over, st.err = true, err
	st.mu.Unlock()
	close(st.done)
	st.wake()
}

func (st *clientStream) wake() {
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// responseBody reads a stream's data frames.
type responseBody struct {
	cc  *clientConn
	st  *clientStream
	ctx context.Context
}

// Read returns the answer's bytes as they arrive, io.EOF after the end
// frame, the connection's error if it broke, the context's if it ended.
func (b *responseBody) Read(p []byte) (int, error) {
	for {
		b.st.mu.Lock()
		if len(b.st.data) > 0 {
			n := copy(p, b.st.data[0])
			if n == len(b.st.data[0]) {
				b.st.data[0] = nil
				b.st.data = b.st.data[1:]
			} else {
				b.st.data[0] = b.st.data[0][n:]
			}
			b.st.mu.Unlock()
			return n, nil
		}
		if b.st.over {
			err := b.st.err
			b.st.mu.Unlock()
			return 0, err
		}
		b.st.mu.Unlock()
		select {
		case <-b.st.notify:
		case <-b.ctx.Done():
			b.cc.cancel(b.st)
			return 0, b.ctx.Err()
		}
	}
}

// Close cancels the stream on the server if its answer has not ended.
func (b *responseBody) Close() error {
	b.cc.cancel(b.st)
	return nil
}

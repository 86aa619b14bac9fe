package apiwire

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// ServerConfig configures the server side of connections.
type ServerConfig struct {
	// Limits bound what a client may send (DefaultLimits if zero).
	Limits Limits
	// IdleTimeout closes a connection that carries no request for this
	// long (0: never).
	IdleTimeout time.Duration
	// FrameTimeout bounds the time a frame's payload takes to arrive once
	// its header did, and the first frame of a connection (0: no bound):
	// a client that sends slowly is cut off, as HTTP's read timeouts do.
	FrameTimeout time.Duration
	// WriteTimeout bounds one write of answers to the connection (0: no
	// bound): a client that stops reading loses its connection, and the
	// requests and watches it held end.
	WriteTimeout time.Duration
	// BaseContext is the parent of every request's context (nil:
	// context.Background()); ending it ends every request.
	BaseContext context.Context
	// Logger gets the reason a connection was closed for bad input (nil:
	// slog.Default()).
	Logger *slog.Logger
}

// pendingBytesMax bounds the answer bytes a connection holds for its
// writer: past it, a handler's Write waits (up to its write deadline) for
// the writer to catch up, so a client that does not read does not grow
// the server's memory.
const pendingBytesMax = 4 << 20

// dataFrameBytesMax bounds one data frame: a larger Write goes out in
// pieces.
const dataFrameBytesMax = 256 << 10

// ServeConn serves wire requests on conn with handler until the client
// closes it, it breaks, it idles past cfg.IdleTimeout or a frame is
// malformed (logged), then closes conn and returns the reason (nil when
// the client closed it between frames). The plain-mode preface, if any,
// must already have been read. Each request runs handler.ServeHTTP on a
// goroutine of its own (a worker, which may serve the connection's later
// requests once it is done: idleWorkersMax); r.TLS is set when conn is a
// *tls.Conn.
func ServeConn(conn net.Conn, handler http.Handler, cfg ServerConfig) error {
	s := newServerConn(conn, handler, cfg)
	return s.serve()
}

// serverConn is one connection's state. Its reader goroutine (serve)
// owns buf; mu guards the rest, which handlers' goroutines and the
// writer share.
type serverConn struct {
	logs    *logLimit // nil: log every malformed connection
	conn    net.Conn
	handler http.Handler
	cfg     ServerConfig
	tls     *tls.ConnectionState
	// host and remote are the requests' Host and RemoteAddr: the
	// connection's addresses, formatted once rather than per request.
	host, remote string
	base         context.Context
	stop         context.CancelFunc

	mu     sync.Mutex
	cond   *sync.Cond // signalled when out grows, shrinks, or the connection closes
	out    []byte     // frames waiting for the writer
	closed bool
	// draining: new requests are refused, and the connection closes when
	// the last one in flight ends.
	draining bool
	// flushThenClose: the writer closes the connection once it has sent
	// what is waiting.
	flushThenClose bool
	// writing: a goroutine is writing a batch taken from out to conn,
	// the writer's or a handler's (send); one at a time, so that batches
	// leave in the order they were taken. spare is a batch's buffer kept
	// for reuse.
	writing bool
	spare   []byte
	werr    error                         // the writer's error, once it failed
	streams map[uint32]context.CancelFunc // requests in flight
	last    uint32                        // the highest stream number opened
	// idleWorkers counts the goroutines waiting on jobs for a request to
	// serve (at most idleWorkersMax).
	idleWorkers int

	// jobs hands a request to an idle worker (work): unbuffered, so that
	// a send succeeds only when one is waiting.
	jobs chan job
}

// job is one request for a worker to serve.
type job struct {
	stream uint32
	req    *http.Request
	cancel context.CancelFunc
}

// idleWorkersMax bounds the goroutines a connection keeps waiting for its
// next request once theirs ended. A goroutine started per request begins
// with a small stack and grows it (copying it) on every request as the API
// handler's path goes deep: 5% of the leader's CPU under the watch load
// (issue 21). A worker kept for the next request keeps its grown stack,
// as net/http's goroutine per connection does. Past the bound a worker
// ends, so that a burst of requests does not leave its goroutines behind.
//
// A bound of 128 was tried (issue 21, leadercpu): under the watch load,
// with hundreds of requests in flight on a connection, the stack growth
// stayed (runtime.copystack 2-6% of the leader's CPU, from newstack and
// from the GC's shrinkstack of idle workers, which then grow again), so
// the bound stays at 16.
const idleWorkersMax = 16

func newServerConn(conn net.Conn, handler http.Handler, cfg ServerConfig) *serverConn {
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	base := cfg.BaseContext
	if base == nil {
		base = context.Background()
	}
	s := &serverConn{conn: conn, handler: handler, cfg: cfg, streams: map[uint32]context.CancelFunc{},
		host: conn.LocalAddr().String(), remote: conn.RemoteAddr().String(), jobs: make(chan job)}
	s.base, s.stop = context.WithCancel(base)
	s.cond = sync.NewCond(&s.mu)
	if tc, ok := conn.(*tls.Conn); ok {
		st := tc.ConnectionState()
		s.tls = &st
	}
	return s
}

func (s *serverConn) serve() error {
	go s.writeLoop()
	err := s.readLoop()
	if errors.Is(err, ErrMalformed) {
		if n, ok := s.logs.allow(); ok {
			s.cfg.Logger.Warn("apiwire: closing a connection that sent a malformed frame", "remote", s.conn.RemoteAddr().String(), "err", err, "not_logged_before", n)
		}
		s.shut()
		return err
	}
	s.shut()
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// shut closes the connection and ends every request's context.
func (s *serverConn) shut() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	s.stop()
	s.conn.Close()
}

func (s *serverConn) readLoop() error {
	r := bufio.NewReaderSize(s.conn, 64<<10)
	var buf []byte
	if s.cfg.FrameTimeout > 0 {
		s.conn.SetReadDeadline(time.Now().Add(s.cfg.FrameTimeout)) // the first frame
	} else {
		s.idle()
	}
	payloadDue := func() {
		if s.cfg.FrameTimeout > 0 {
			s.conn.SetReadDeadline(time.Now().Add(s.cfg.FrameTimeout))
		}
	}
	for {
		f, next, err := readFrame(r, buf, s.cfg.Limits.FrameBytesMax, payloadDue)
		buf = next
		if cap(buf) > readStep {
			buf = nil // a large frame's buffer is not kept for the connection's life
		}
		if err != nil {
			return err
		}
		// Until the next header: no bound while requests are in flight
		// (the client may be waiting for their answers), else idle.
		s.mu.Lock()
		inFlight := len(s.streams) > 0
		s.mu.Unlock()
		if inFlight {
			s.conn.SetReadDeadline(time.Time{})
		} else {
			s.idle()
		}
		switch f.Type {
		case FrameRequest:
			if err := s.open(f); err != nil {
				return err
			}
		case FrameCancel:
			s.mu.Lock()
			cancel := s.streams[f.Stream]
			s.mu.Unlock()
			if cancel != nil {
				cancel()
			}
		default:
			return fmt.Errorf("%w: a client sent frame type %d", ErrMalformed, f.Type)
		}
	}
}

// idle arms the idle timeout; the caller holds s.mu or has opened no
// request yet.
func (s *serverConn) idle() {
	if s.cfg.IdleTimeout > 0 {
		s.conn.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
	}
}

// open starts serving request frame f on a worker: an idle one of the
// connection's, or a new one. The body is copied: f's payload is the
// reader's buffer.
func (s *serverConn) open(f Frame) error {
	if f.Stream%2 == 0 {
		return fmt.Errorf("%w: request on even stream %d", ErrMalformed, f.Stream)
	}
	rf, err := DecodeRequest(f.Payload, s.cfg.Limits)
	if err != nil {
		return fmt.Errorf("stream %d: %w", f.Stream, err)
	}
	u, err := url.ParseRequestURI(rf.Target)
	if err != nil {
		return fmt.Errorf("%w: stream %d: target %q: %v", ErrMalformed, f.Stream, clip(rf.Target), err)
	}
	s.mu.Lock()
	if f.Stream <= s.last {
		s.mu.Unlock()
		return fmt.Errorf("%w: stream %d reused (the last opened was %d)", ErrMalformed, f.Stream, s.last)
	}
	s.last = f.Stream
	if s.draining || len(s.streams) >= s.cfg.Limits.StreamsMax {
		if len(s.out) >= pendingBytesMax {
			// Refusals the client does not read would grow without bound.
			s.mu.Unlock()
			return fmt.Errorf("%w: stream %d refused while %d bytes of answers wait for the client to read them", ErrMalformed, f.Stream, pendingBytesMax)
		}
		reason := fmt.Sprintf("too many streams: %d in flight, the limit", s.cfg.Limits.StreamsMax)
		if s.draining {
			reason = "server shutting down"
		}
		s.out = appendFrame(s.out, FrameRefuse, f.Stream, []byte(reason))
		s.cond.Broadcast()
		s.mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithCancel(s.base)
	s.streams[f.Stream] = cancel
	if len(s.streams) == 1 {
		s.conn.SetReadDeadline(time.Time{}) // a request in flight: not idle
	}
	s.mu.Unlock()

	// Built on the stack and copied once by WithContext, the only way to
	// set a request's context: one allocation of a Request, not two.
	base := http.Request{
		Method: rf.Method, URL: u, RequestURI: rf.Target,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rf.Header, Host: s.host, RemoteAddr: s.remote,
		TLS: s.tls,
	}
	if len(rf.Body) > 0 {
		base.Body, base.ContentLength = newRequestBody(bytes.Clone(rf.Body)), int64(len(rf.Body))
	} else {
		base.Body = http.NoBody
	}
	req := base.WithContext(ctx)
	j := job{stream: f.Stream, req: req, cancel: cancel}
	select {
	case s.jobs <- j: // an idle worker took it
	default:
		go s.work(j)
	}
	return nil
}

// work serves j, then, while fewer than idleWorkersMax others wait, waits
// for the connection's next request and serves it, until the connection
// ends.
//
// A worker's requests share one responseWriter, its header map and its
// frames' buffer, reset for each (newResponse): one allocation per worker
// rather than three or more per request. A handler must not use its
// ResponseWriter once it has returned (net/http's rule too).
func (s *serverConn) work(j job) {
	w := &responseWriter{s: s, header: make(http.Header)}
	for {
		w.reset(j.stream)
		s.run(w, j.req, j.cancel)
		j = job{} // an idle worker holds no request's memory
		w.reset(0)
		s.mu.Lock()
		if s.closed || s.idleWorkers >= idleWorkersMax {
			s.mu.Unlock()
			return
		}
		s.idleWorkers++
		s.mu.Unlock()
		select {
		case j = <-s.jobs:
		case <-s.base.Done():
		}
		s.mu.Lock()
		s.idleWorkers--
		s.mu.Unlock()
		if j.req == nil {
			return
		}
	}
}

// requestBody is a request's body, read from memory: a bytes.Reader that
// closes, in one allocation (io.NopCloser over a bytes.Reader is two).
// It is a MemoryBody.
type requestBody struct {
	bytes.Reader
	b []byte // what the reader reads
}

func newRequestBody(b []byte) *requestBody {
	body := &requestBody{b: b}
	body.Reset(b)
	return body
}

// Close does nothing: the body is in memory.
func (*requestBody) Close() error { return nil }

// TakeBytes returns the body's bytes not read yet and leaves none to read.
func (b *requestBody) TakeBytes() []byte {
	rest := b.b[len(b.b)-b.Len():]
	b.Reset(nil)
	b.b = nil
	return rest
}

// MemoryBody is implemented by the body (http.Request.Body) of every
// request with one that the server serves: a copy of the request frame's
// body, whole in memory, which a handler may take rather than copy it
// again as it reads. A request without a body has http.NoBody.
type MemoryBody interface {
	io.ReadCloser
	// TakeBytes returns the bytes not read yet, which the caller then
	// owns, and leaves none to read.
	TakeBytes() []byte
}

// run serves one request with w, reset for its stream, and ends the
// stream.
func (s *serverConn) run(w *responseWriter, req *http.Request, cancel context.CancelFunc) {
	stream := w.stream
	defer func() {
		if p := recover(); p != nil {
			// As net/http does: a panicking handler loses its answer, not
			// the server. The stream is refused rather than ended, so that
			// the client does not take a cut answer for a whole one.
			if p != http.ErrAbortHandler {
				s.cfg.Logger.Error("apiwire: handler panic", "path", req.URL.Path, "panic", p)
			}
			w.abort()
		} else {
			w.finish()
		}
		cancel()
		s.mu.Lock()
		delete(s.streams, stream)
		idle := len(s.streams) == 0 && !s.closed
		draining := s.draining
		if idle && !draining {
			// Under mu, as open lifts the deadline: a request opened
			// meanwhile is not cut off by this one's idle timeout.
			s.idle()
		}
		s.mu.Unlock()
		if idle && draining {
			s.closeWhenFlushed()
		}
	}()
	s.handler.ServeHTTP(w, req)
}

// send appends frames to the output, waiting for room (up to deadline, if
// set) when the connection holds pendingBytesMax already, and writes them
// itself when no one is writing: a single client's answer then leaves on
// its handler's goroutine, without waking the writer's (a hand-off on
// every write's path, issue 15). When a write is in progress, or another
// handler is about to write, it leaves them to that one or to the writer,
// which sends them next, in order.
//
// When other requests are in flight on the connection, the handler that
// is to write first yields its processor once (runtime.Gosched) before it
// takes the output: the handlers a Raft batch woke together are then
// runnable, and they append their answers meanwhile, so that the answers
// ready together leave in one write(2) rather than one each (issue 21:
// about one write per answer under the watch load). A request alone on
// its connection does not yield: its answer leaves at once.
func (s *serverConn) send(deadline time.Time, frames []byte) error {
	s.mu.Lock()
	if err := s.room(deadline); err != nil {
		s.mu.Unlock()
		return err
	}
	s.out = append(s.out, frames...)
	if s.writing {
		// The one writing sends these next (write hands over to the
		// writer); room's waiters need no wake-up for output that grew.
		s.mu.Unlock()
		return nil
	}
	s.writing = true // claimed: answers appended from now on wait for this write
	if len(s.streams) > 1 {
		s.mu.Unlock()
		runtime.Gosched()
		s.mu.Lock()
	}
	batch := s.take()
	s.mu.Unlock()
	return s.write(batch)
}

// take takes the waiting frames for writing; the caller holds s.mu, has
// set s.writing, and writes them with write.
func (s *serverConn) take() []byte {
	batch := s.out
	s.out, s.spare = s.spare[:0], nil
	s.cond.Broadcast() // room for writers waiting on pendingBytesMax
	return batch
}

// write writes a batch taken by take, then hands the writing over: to the
// writer, if frames came meanwhile. A failure closes the connection.
func (s *serverConn) write(batch []byte) error {
	if s.cfg.WriteTimeout > 0 {
		s.conn.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	}
	_, err := s.conn.Write(batch)
	s.mu.Lock()
	s.writing = false
	if err != nil && s.werr == nil {
		s.werr = err
	}
	if cap(batch) <= 1<<20 { // do not keep a burst's buffer forever
		s.spare = batch[:0]
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	if err != nil {
		s.shut()
	}
	return err
}

// room waits, with s.mu held, until the output is under pendingBytesMax
// (up to deadline, if set), and fails if the connection is closed.
func (s *serverConn) room(deadline time.Time) error {
	var timer *time.Timer
	for len(s.out) >= pendingBytesMax && !s.closed {
		if !deadline.IsZero() {
			if !time.Now().Before(deadline) {
				return fmt.Errorf("apiwire: write deadline passed: %w", errTimeout)
			}
			if timer == nil {
				timer = time.AfterFunc(time.Until(deadline), func() {
					s.mu.Lock()
					s.cond.Broadcast()
					s.mu.Unlock()
				})
				defer timer.Stop()
			}
		}
		s.cond.Wait()
	}
	if s.closed {
		if s.werr != nil {
			return s.werr
		}
		return net.ErrClosed
	}
	return nil
}

var errTimeout = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string { return "i/o timeout" }
func (timeoutError) Timeout() bool { return true }

// writeLoop sends whatever frames are waiting in one write, until the
// connection closes. Handlers write their own answers when no write is in
// progress (send); the writer sends what comes while one is.
func (s *serverConn) writeLoop() {
	for {
		s.mu.Lock()
		for !s.closed && (s.writing || (len(s.out) == 0 && !s.flushThenClose)) {
			s.cond.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		if len(s.out) == 0 { // flushThenClose, and all is sent
			s.mu.Unlock()
			s.shut()
			return
		}
		s.writing = true
		batch := s.take()
		s.mu.Unlock()
		if s.write(batch) != nil {
			return
		}
	}
}

// responseWriter is the http.ResponseWriter of one stream.
//
// It holds its frames until the handler flushes or ends, or until
// flushBytesMin of them wait, as net/http's writer buffers its answer: a
// short answer's head, data and end leave in one write, which the client
// reads at once, instead of as many writes and wake-ups of its reader.
//
// responseWriter is used by its handler's goroutine only, as net/http's.
type responseWriter struct {
	s        *serverConn
	stream   uint32
	header   http.Header
	status   int // 0 until the head is written
	deadline time.Time
	err      error
	frames   []byte // written but not yet sent
}

// flushBytesMin is the frames a responseWriter holds before it sends them
// without a flush.
const flushBytesMin = 64 << 10

// framesBytesKept bounds the frames' buffer a worker's responseWriter keeps
// for its next request: a large answer's is not kept for the
// connection's life.
const framesBytesKept = 16 << 10

// reset readies w for a request on stream (0: none, between requests): no
// headers, no status, no deadline, no error, no frames held, keeping the
// header map and the frames' buffer.
func (w *responseWriter) reset(stream uint32) {
	clear(w.header)
	frames := w.frames[:0]
	if cap(frames) > framesBytesKept {
		frames = nil
	}
	*w = responseWriter{s: w.s, stream: stream, header: w.header, frames: frames}
}

// Header returns the answer's headers, sent with the head.
func (w *responseWriter) Header() http.Header { return w.header }

// WriteHeader writes the head with status (once; later calls are ignored,
// as net/http's apart from its log line).
func (w *responseWriter) WriteHeader(status int) {
	if w.status != 0 || w.err != nil {
		return
	}
	if status < 100 || status > 999 {
		panic(fmt.Sprintf("apiwire: invalid WriteHeader code %d", status))
	}
	if status < 200 {
		return // informational answers do not travel
	}
	w.status = status
	out, err := appendHead(w.frames, w.stream, status, w.header, w.s.cfg.Limits)
	if err != nil {
		// Headers that cannot travel: the stream ends aborted (the
		// handler ran), so the client learns why rather than waiting.
		w.frames = appendFrame(w.frames, FrameAbort, w.stream, []byte(err.Error()))
		w.err = err
		w.send()
		return
	}
	w.frames = out
}

// Write writes p as data frames, the head first if not written.
func (w *responseWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		if w.header.Get("Content-Type") == "" && len(p) > 0 {
			w.header.Set("Content-Type", http.DetectContentType(p))
		}
		w.WriteHeader(http.StatusOK)
	}
	written := 0
	for w.err == nil && written < len(p) {
		chunk := p[written:min(len(p), written+dataFrameBytesMax)]
		w.frames = appendFrame(w.frames, FrameData, w.stream, chunk)
		written += len(chunk)
		if len(w.frames) >= flushBytesMin {
			w.send()
		}
	}
	return written, w.err
}

// send sends the frames held, and keeps the first error.
func (w *responseWriter) send() {
	if len(w.frames) == 0 {
		return
	}
	if err := w.s.send(w.deadline, w.frames); err != nil && w.err == nil {
		w.err = err
	}
	w.frames = w.frames[:0]
}

// Flush sends the head, if not written, and everything written.
func (w *responseWriter) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err == nil {
		w.send()
	}
}

// SetWriteDeadline bounds the waits of later Writes (http.ResponseController).
func (w *responseWriter) SetWriteDeadline(t time.Time) error {
	w.deadline = t
	return nil
}

// SetReadDeadline does nothing: the request's body arrived with it.
func (w *responseWriter) SetReadDeadline(time.Time) error { return nil }

// finish ends the stream: the head if none was written, the rest, then
// the end frame, in one send.
func (w *responseWriter) finish() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return
	}
	w.frames = appendFrame(w.frames, FrameEnd, w.stream, nil)
	w.deadline = time.Time{}
	w.send()
}

// abort ends the stream with an abort frame: its answer is lost, after
// the handler ran (so not a refusal: the request may have had its
// effect). What the handler wrote and did not flush is dropped.
func (w *responseWriter) abort() {
	if w.err != nil {
		return
	}
	w.frames = appendFrame(w.frames[:0], FrameAbort, w.stream, []byte("the handler failed; the answer is lost"))
	w.deadline = time.Time{}
	w.send()
}

// statusText is strconv.Itoa(status) + " " + http.StatusText(status), as
// an http.Response's Status.
func statusText(status int) string {
	return strconv.Itoa(status) + " " + http.StatusText(status)
}

// Server serves wire connections with one handler and can drain them all
// at shutdown.
//
// Server is safe for concurrent use.
type Server struct {
	handler http.Handler
	cfg     ServerConfig
	logs    logLimit // the malformed connections logged: one a second

	mu       sync.Mutex
	conns    map[*serverConn]struct{}
	closed   chan struct{} // closed, and replaced, when a connection ends
	draining bool
}

// NewServer returns a server of handler.
func NewServer(handler http.Handler, cfg ServerConfig) *Server {
	return &Server{handler: handler, cfg: cfg, conns: map[*serverConn]struct{}{}, closed: make(chan struct{})}
}

// ServeConn is the package's ServeConn, for a connection the server
// drains.
func (s *Server) ServeConn(conn net.Conn) error {
	sc := newServerConn(conn, s.handler, s.cfg)
	sc.logs = &s.logs
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		conn.Close()
		return net.ErrClosed
	}
	s.conns[sc] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, sc)
		close(s.closed)
		s.closed = make(chan struct{})
		s.mu.Unlock()
	}()
	return sc.serve()
}

// Drain refuses new requests on every connection, closes those with none
// in flight at once and the others as their last request ends (a request
// ends early when BaseContext ends).
func (s *Server) Drain() {
	s.mu.Lock()
	s.draining = true
	conns := make([]*serverConn, 0, len(s.conns))
	for sc := range s.conns {
		conns = append(conns, sc)
	}
	s.mu.Unlock()
	for _, sc := range conns {
		sc.drain()
	}
}

// Wait waits until every connection the server serves has ended (after
// Drain: once the requests in flight on it ended), or ctx does.
func (s *Server) Wait(ctx context.Context) error {
	for {
		s.mu.Lock()
		n, closed := len(s.conns), s.closed
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-closed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// drain refuses new requests and closes the connection once none is in
// flight.
func (s *serverConn) drain() {
	s.mu.Lock()
	s.draining = true
	idle := len(s.streams) == 0
	s.mu.Unlock()
	if idle {
		s.closeWhenFlushed()
	}
}

// closeWhenFlushed has the writer close the connection once the answers
// waiting are sent.
func (s *serverConn) closeWhenFlushed() {
	s.mu.Lock()
	s.flushThenClose = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

// logLimit lets one log line through a second, so that a peer sending
// malformed frames on connection after connection cannot flood the log.
type logLimit struct {
	mu       sync.Mutex
	last     time.Time
	withheld int
}

// allow reports whether to log now, and how many lines it withheld since
// the last it allowed. A nil logLimit allows every line.
func (l *logLimit) allow() (withheld int, ok bool) {
	if l == nil {
		return 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Sub(l.last) >= time.Second {
		withheld, l.withheld, l.last = l.withheld, 0, now
		return withheld, true
	}
	l.withheld++
	return 0, false
}

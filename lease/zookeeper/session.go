package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
)

// errExpired means a tenure's session ended on the server (it expired, or
// the client closed it): the ephemeral node is gone, or will be at once.
var errExpired = errors.New("session expired")

// session is one ZooKeeper session: one zk.Conn, the state its events
// report, and the timeout the server granted. The zk client reconnects on
// its own (to any server of the ensemble) and keeps the session across
// reconnections; it also, after an expiry, opens a new session silently.
// A session therefore says two things the client does not: whether the
// session is usable now (ready), and, for a tenure's session (the lease's
// own), that an expiry is final.
//
// session is safe for concurrent use: the zk client calls onEvent from its
// goroutines, and requests come from any goroutine.
type session struct {
	conn *zk.Conn

	// final says an expiry ends this session for good (a tenure's), rather
	// than a new session replacing it (the Backend's shared one).
	final bool

	// grantedMS is the session timeout the server granted, in
	// milliseconds, as read off the connect response (sniffConn): the zk
	// client keeps it private. 0 until the first connect response.
	grantedMS atomic.Int32

	// dialErr is the last failure to dial a server, for the message of
	// an Open that found no server.
	dialErr atomic.Pointer[error]

	mu      sync.Mutex
	state   zk.State
	id      int64         // the first session id, for a final session; 0 before
	expired bool          // the session expired (final: for good)
	changed chan struct{} // closed and replaced at every state change
}

// dialSession starts connecting to servers with the given session timeout
// and returns at once; ready says when the session is usable. The zk
// client's own log goes to log at debug level.
func dialSession(servers []string, timeout time.Duration, final bool, log *slog.Logger) (*session, error) {
	s := &session{final: final, changed: make(chan struct{}), state: zk.StateDisconnected}
	conn, _, err := zk.Connect(servers, timeout,
		zk.WithDialer(s.dial),
		zk.WithEventCallback(s.onEvent),
		zk.WithLogger(zkLogger{log}),
		// A reply larger than ZooKeeper's own limit (jute.maxbuffer)
		// is not one; refuse it rather than allocate whatever length a
		// peer announces.
		zk.WithMaxBufferSize(maxReplyBytes),
		// Requests are small (checkName, checkHolder, checkChroot bound
		// them); the client's default buffer is 1.5 MiB per session.
		zk.WithMaxConnBufferSize(maxRequestBytes),
	)
	if err != nil {
		return nil, err
	}
	s.conn = conn
	return s, nil
}

// Bounds on one reply from a server and one request to it.
const (
	maxReplyBytes   = 1 << 20
	maxRequestBytes = 64 << 10
)

// onEvent records the session's state. The zk client calls it on its own
// goroutines, in order, and it must not block.
func (s *session) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = ev.State
	switch {
	case ev.State == zk.StateExpired:
		s.expired = true
	case ev.State == zk.StateHasSession && !s.final:
		s.expired = false // the shared session was replaced by a new one
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// ready waits until the session is usable: connected, and, for a final
// session, still the first one. It returns errExpired if a final session
// has expired, or ctx's error. While it waits, the session is suspended:
// the server may still hold it, or may have expired it already; nobody
// can tell until the client reconnects.
func (s *session) ready(ctx context.Context) error {
	for {
		s.mu.Lock()
		state, expired, changed := s.state, s.expired, s.changed
		if state == zk.StateHasSession && !expired && s.final {
			// The client sets the id before it reports HasSession.
			id := s.conn.SessionID()
			if s.id == 0 {
				s.id = id
			}
			if id != s.id {
				// A new session in place of ours: ours expired without
				// our hearing of it.
				s.expired = true
				expired = true
			}
		}
		s.mu.Unlock()
		switch {
		case expired && s.final:
			return errExpired
		case state == zk.StateHasSession && !expired:
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("no session with any server (state %v): %w", state, ctx.Err())
		}
	}
}

// sessionID returns the id of a final session's (first) session, 0 before
// ready has succeeded once.
func (s *session) sessionID() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// granted returns the session timeout the server granted.
func (s *session) granted() time.Duration {
	return time.Duration(s.grantedMS.Load()) * time.Millisecond
}

// close ends the session: the server deletes its ephemeral nodes at once
// if the close request reaches it, else at the session timeout. It blocks
// until the client has given up (about a second at most without a server).
func (s *session) close() { s.conn.Close() }

// lastDialError returns the last failure to dial a server, or nil.
func (s *session) lastDialError() error {
	if p := s.dialErr.Load(); p != nil {
		return *p
	}
	return nil
}

// dial is the zk client's Dialer: a TCP connection whose first bytes, the
// server's connect response, are read for the granted timeout.
func (s *session) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		s.dialErr.Store(&err)
		return nil, err
	}
	return &sniffConn{Conn: c, s: s}, nil
}

// sniffConn reads the session timeout out of the connect response that
// opens every connection: a 4-byte length, then the protocol version and
// the timeout in milliseconds, big-endian int32s (ZooKeeper's
// ConnectResponse, unchanged since 3.0). The zk client reads it itself and
// keeps it private; the lease needs it, because a session the server
// grants less time than the TTL would expire before the holder's deadline.
//
// Until that response is read, the connection's deadlines are capped at
// handshakeTimeoutMax: the zk client waits ten times two thirds of the
// session timeout for it (400 s for a one-minute lease), so a server that
// accepts connections before it serves (a restarting one) would hold the
// holder's reconnection for longer than its lease. A capped handshake
// fails, and the client dials again.
type sniffConn struct {
	net.Conn
	s    *session
	head [12]byte
	n    int // bytes of head read so far
	// connected: the connect response has been read; deadlines are the
	// zk client's own from then on.
	connected atomic.Bool
}

// handshakeTimeoutMax bounds the wait for a server's connect response.
const handshakeTimeoutMax = 3 * time.Second

// SetReadDeadline caps t during the handshake (see sniffConn).
func (c *sniffConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.capped(t))
}

// SetWriteDeadline caps t during the handshake (see sniffConn).
func (c *sniffConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.capped(t))
}

func (c *sniffConn) capped(t time.Time) time.Time {
	if c.connected.Load() || t.IsZero() {
		return t
	}
	if limit := time.Now().Add(handshakeTimeoutMax); t.After(limit) {
		return limit
	}
	return t
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.n < len(c.head) && n > 0 {
		k := copy(c.head[c.n:], p[:n])
		c.n += k
		if c.n == len(c.head) {
			c.connected.Store(true)
			// An expired session's response carries timeout 0: keep
			// what was granted before.
			if ms := int32(binary.BigEndian.Uint32(c.head[8:12])); ms > 0 {
				c.s.grantedMS.Store(ms)
			}
		}
	}
	return n, err
}

// zkLogger sends the zk client's log to slog at debug level: it reports
// every reconnection, which is routine here, not news.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug("zookeeper client: " + fmt.Sprintf(format, args...))
}

// call runs one request of the zk client on s once the session is ready,
// and returns when it answers or ctx is done, whichever comes first. The
// zk client's requests have no context: one abandoned here goes on in the
// background until the server answers or the connection closes, and its
// outcome is unknown to the caller (lease.ErrUnavailable). Requests are
// sent only on a ready session, so that one queued while disconnected is
// not sent after a reconnection, long after its caller gave up.
func call[T any](ctx context.Context, s *session, request func(*zk.Conn) (T, error)) (T, error) {
	var zero T
	if err := s.ready(ctx); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := request(s.conn)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		if errors.Is(r.err, zk.ErrSessionExpired) && s.final {
			r.err = errExpired
		}
		return r.v, r.err
	case <-ctx.Done():
		return zero, fmt.Errorf("no answer: %w", ctx.Err())
	}
}

// callIdempotent is call for a request that changes nothing (a read), which may
// therefore be sent again: when the connection fails under it, it waits
// for the client to reconnect and asks again, until ctx is done. A cut
// connection then costs a reader time, not an error.
func callIdempotent[T any](ctx context.Context, s *session, request func(*zk.Conn) (T, error)) (T, error) {
	for {
		v, err := call(ctx, s, request)
		if err == nil || !lostConnection(err) || ctx.Err() != nil {
			return v, err
		}
		// The client may not have noticed yet: give it a moment, or
		// until its state changes.
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-time.After(retryPause):
		case <-ctx.Done():
			return v, err
		}
	}
}

// retryPause spaces the attempts of a read whose connection failed.
const retryPause = 20 * time.Millisecond

// lostConnection reports whether err says the connection failed before
// an answer came (as opposed to an answer from the server, or a session
// that is over).
func lostConnection(err error) bool {
	var netErr net.Error
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

package apiwire

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Listener sorts the connections of an inner listener: those that speak
// wire (plain ones that open with Preface, TLS ones whose ALPN chose
// ALPN) go to serve, on a goroutine of their own; Accept returns the
// others, with any bytes read to sort them still to be read, for an
// http.Server. Sorting runs on a goroutine per connection, within
// ListenerConfig.SortTimeout: a slow client holds up no other.
// ListenerConfig.Admit, a server's connection limit, decides at accept,
// before sorting, which connections are kept, and SortingMax bounds how
// many are sorted at once.
//
// Listener is safe for concurrent use.
type Listener struct {
	inner       net.Listener
	serve       func(net.Conn)
	admit       func(net.Conn) bool
	release     func(net.Conn)
	sortTimeout time.Duration
	sortingMax  int64
	sorting     atomic.Int64 // connections being sorted (or waiting for Accept)
	conns       chan net.Conn
	done        chan struct{}
	closeOnce   sync.Once
	errMu       sync.Mutex
	err         error
}

// ListenerConfig configures a Listener.
type ListenerConfig struct {
	// Admit, if set, decides at accept, before a byte is read or written
	// (before a TLS handshake), whether a connection is kept: false closes
	// it there, so that a server's connection limit holds for the
	// connections still being sorted too. A connection Admit kept is
	// passed to Release once if the listener closes it itself (it sent
	// nothing within SortTimeout, or the listener closed first); one the
	// listener hands on, to serve or to Accept, is the receiver's to
	// account for. Admit and Release are called from the listener's
	// goroutines.
	Admit   func(net.Conn) bool
	Release func(net.Conn)
	// SortTimeout bounds the time a connection has to complete its TLS
	// handshake, or to send its first bytes, before it is closed.
	SortTimeout time.Duration
	// SortingMax bounds the connections being sorted at once (in their
	// handshake, or not yet sent their first bytes): one more is closed
	// as soon as it is accepted. Sorted connections count no longer:
	// their server's own limits take over. 0: no bound.
	SortingMax int
}

// NewListener starts sorting inner's connections (see Listener).
func NewListener(inner net.Listener, cfg ListenerConfig, serve func(net.Conn)) *Listener {
	l := &Listener{inner: inner, serve: serve, admit: cfg.Admit, release: cfg.Release, sortTimeout: cfg.SortTimeout,
		sortingMax: int64(cfg.SortingMax), conns: make(chan net.Conn), done: make(chan struct{})}
	if l.admit == nil {
		l.admit = func(net.Conn) bool { return true }
	}
	if l.release == nil {
		l.release = func(net.Conn) {}
	}
	go l.acceptLoop()
	return l
}

func (l *Listener) acceptLoop() {
	var backoff time.Duration
	for {
		c, err := l.inner.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				// Out of file descriptors (EMFILE), a timeout: wait and
				// try again, 5 ms doubling to 1 s, as net/http does; the
				// API must not stop for a passing shortage.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
					continue
				case <-l.done:
				}
			}
			l.errMu.Lock()
			l.err = err
			l.errMu.Unlock()
			l.Close()
			return
		}
		backoff = 0
		if !l.admit(c) {
			c.Close()
			continue
		}
		if n := l.sorting.Add(1); l.sortingMax > 0 && n > l.sortingMax {
			l.sorting.Add(-1)
			l.drop(c)
			continue
		}
		go l.sort(c)
	}
}

// sort hands c to serve or to Accept.
func (l *Listener) sort(c net.Conn) {
	c.SetDeadline(time.Now().Add(l.sortTimeout))
	if tc, ok := c.(*tls.Conn); ok {
		// A failed handshake goes on to the http.Server, which fails it
		// again and logs it as it always has.
		if tc.Handshake() == nil && tc.ConnectionState().NegotiatedProtocol == ALPN {
			c.SetDeadline(time.Time{})
			l.sorting.Add(-1)
			l.serve(c)
			return
		}
		c.SetDeadline(time.Time{})
		l.hand(c)
		return
	}
	br := bufio.NewReaderSize(c, 4<<10)
	wire := true
	for n := 1; n <= len(Preface); n++ {
		b, err := br.Peek(n)
		if err != nil {
			l.sorting.Add(-1)
			l.drop(c) // nothing sent within the timeout: as net/http's header timeout
			return
		}
		if b[n-1] != Preface[n-1] {
			wire = false
			break
		}
	}
	c.SetDeadline(time.Time{})
	bc := &bufferedConn{Conn: c, r: br}
	if wire {
		br.Discard(len(Preface))
		l.sorting.Add(-1)
		l.serve(bc)
		return
	}
	l.hand(bc)
}

// hand queues c for Accept; it stops counting as being sorted once taken.
func (l *Listener) hand(c net.Conn) {
	defer l.sorting.Add(-1)
	select {
	case l.conns <- c:
	case <-l.done:
		l.drop(c)
	}
}

// drop closes c, which the listener admitted and does not hand on.
func (l *Listener) drop(c net.Conn) {
	c.Close()
	l.release(c)
}

// Accept returns the next connection that does not speak wire.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.errMu.Lock()
		defer l.errMu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// Close stops accepting; connections already handed on stay open.
func (l *Listener) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.done)
		err = l.inner.Close()
	})
	return err
}

// Addr returns the inner listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// NewBufferedConn returns c read through a buffer of size bytes: one
// read system call takes in whatever the peer has sent, where a reader
// of small pieces (net/http's HTTP/2 server reads a frame's 9-byte header,
// then its payload) would make one each. The Listener hands its plain
// connections on so, through the buffer it sorted them with.
func NewBufferedConn(c net.Conn, size int) net.Conn {
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, size)}
}

// bufferedConn is a connection read through r.
//
// bufferedConn is safe for one reader and one writer at a time, as
// net.Conn is.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

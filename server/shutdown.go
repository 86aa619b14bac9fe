package server

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// How a node's API stops (Serve): net/http's Shutdown closes the
// listener and the idle connections, and waits for every other connection
// to go idle. Two kinds never do on their own: a request that never ends
// (a watch stream, a long poll, a lease session stream), and a connection
// that was made but has not sent a request yet (a client's or a peer's
// warm connection; Shutdown waits 5 s before it counts those as idle).
// Either kept a stopping node alive for the whole bound, 2 s, after a
// hand-over that took milliseconds. So the API closes the connections
// that never sent a request at once (a client's transport often dials one
// it ends up not using), and after streamGrace it ends what is left: every
// request still open sees its context end (a stream ends, and its client
// reconnects to another node, from the revision it had), and the
// connections that were made meanwhile are closed too.

// streamGrace is how long a stopping API lets its requests finish before
// it ends the ones still open: a write or a read takes milliseconds, and
// what is still open after this is a stream (or stuck).
const streamGrace = 250 * time.Millisecond

// apiConns follows the state of an http.Server's connections.
//
// apiConns is safe for concurrent use: the server calls track from its
// accept loop and its connections' goroutines.
type apiConns struct {
	mu      sync.Mutex
	state   map[net.Conn]http.ConnState
	changed chan struct{} // closed at the next change; nil until active asks (only a shutdown waits)
}

func newAPIConns() *apiConns {
	return &apiConns{state: map[net.Conn]http.ConnState{}}
}

// track is an http.Server ConnState hook; next, if set, is the one it
// replaces.
func (c *apiConns) track(next func(net.Conn, http.ConnState)) func(net.Conn, http.ConnState) {
	return func(conn net.Conn, s http.ConnState) {
		if next != nil {
			next(conn, s)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if s == http.StateClosed || s == http.StateHijacked {
			delete(c.state, conn)
		} else {
			c.state[conn] = s
		}
		if c.changed != nil {
			close(c.changed)
			c.changed = nil
		}
	}
}

// closeUnused closes the connections that have not sent a request yet.
func (c *apiConns) closeUnused() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for conn, s := range c.state {
		if s == http.StateNew {
			conn.Close()
		}
	}
}

// active returns how many connections serve a request, and a channel
// closed at the next change.
func (c *apiConns) active() (int, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.state {
		if s == http.StateActive {
			n++
		}
	}
	if c.changed == nil {
		c.changed = make(chan struct{})
	}
	return n, c.changed
}

// stoppableAPI is srv with what shutdownAPI needs: its connections
// followed, and its requests' contexts derived from one that
// shutdownAPI ends.
type stoppableAPI struct {
	srv      *http.Server
	conns    *apiConns
	requests context.CancelFunc
}

func newStoppableAPI(srv *http.Server) *stoppableAPI {
	base, cancel := context.WithCancel(context.Background())
	s := &stoppableAPI{srv: srv, conns: newAPIConns(), requests: cancel}
	srv.BaseContext = func(net.Listener) context.Context { return base }
	srv.ConnState = s.conns.track(srv.ConnState)
	return s
}

// shutdown stops the API within bound: Shutdown, the unused connections
// closed, then, after streamGrace, the requests still open ended; once no
// request is left (or bound passed) the server is closed.
func (s *stoppableAPI) shutdown(bound time.Duration) error {
	defer s.requests()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.srv.Shutdown(ctx) }()
	// Nothing was asked on these: closing them loses no request (a client
	// whose first bytes were still on their way sees the connection close
	// and sends again elsewhere).
	s.conns.closeUnused()
	select {
	case err := <-done:
		return err
	case <-time.After(min(streamGrace, bound)):
	}
	s.requests()
	s.conns.closeUnused()
	for {
		n, changed := s.conns.active()
		if n == 0 {
			break
		}
		select {
		case err := <-done:
			return err
		case <-changed:
		case <-ctx.Done():
			s.srv.Close()
			return ctx.Err()
		}
	}
	// Only idle connections are left, which Shutdown closes at its next
	// look (up to half a second away): close them now.
	return s.srv.Close()
}

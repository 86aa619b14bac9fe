package apiwire

import (
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// Admit decides at accept, before a byte is read: a connection it refuses
// is closed there. One the listener admitted and then closes itself (it
// sent nothing within SortTimeout) is passed to Release, so that a
// limit shared with the server frees its place.
func TestAdmitDecidesAtAcceptAndReleaseFollowsDrops(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var open atomic.Int64
	released := make(chan struct{}, 8)
	cfg := ListenerConfig{
		SortTimeout: 200 * time.Millisecond,
		Admit: func(net.Conn) bool {
			if open.Add(1) > 1 {
				open.Add(-1)
				return false
			}
			return true
		},
		Release: func(net.Conn) {
			open.Add(-1)
			released <- struct{}{}
		},
	}
	ws := NewServer(echo, ServerConfig{Logger: quiet})
	l := NewListener(inner, cfg, func(c net.Conn) { ws.ServeConn(c) })
	srv := &http.Server{Handler: echo}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close(); ws.Drain() })

	silent, err := net.Dial("tcp", l.Addr().String()) // admitted: it holds the one place
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// The accept loop takes silent first (the backlog is served in
	// order), so this one is refused at accept: closed, nothing read.
	extra, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(30 * time.Second)) // generous: closed at once
	var ne net.Error
	if _, err := extra.Read(make([]byte, 1)); err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("a connection Admit refused: %v, want it closed", err)
	}
	// silent sends nothing: after SortTimeout the listener drops it and
	// releases its place.
	select {
	case <-released:
	case <-time.After(30 * time.Second):
		t.Fatal("the silent connection was never released")
	}
	if got := open.Load(); got != 0 {
		t.Fatalf("%d places held after the drop, want 0", got)
	}
	// The place is free again: a request goes through (the http.Server
	// holds it; its connection's end is the server's to count).
	resp, err := client(t).Get("http://" + l.Addr().String() + "/after")
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	resp.Body.Close()
}

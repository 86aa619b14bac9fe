package apiwire

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// onlyConn returns the transport's one connection.
func onlyConn(t *testing.T, tr *Transport) *clientConn {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.conns) != 1 {
		t.Fatalf("%d connections, want 1", len(tr.conns))
	}
	for _, cc := range tr.conns {
		return cc
	}
	return nil
}

// Once the server has shown it speaks wire, a request alone on its
// connection is written by its caller, in one system call, not handed to
// the writer goroutine (issue 15, `p50c`); the first, with the preface,
// still goes through the writer.
func TestRequestWrittenByItsCaller(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("direct writes are Linux's (MSG_DONTWAIT)")
	}
	addr, _ := serve(t, echo, ServerConfig{})
	tr := NewTransport(TransportConfig{})
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	for i := range 4 {
		resp, err := hc.Post("http://"+addr+"/v1/kv/a", "", strings.NewReader("value"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := `POST /v1/kv/a  auth="" body="value"`; string(b) != want {
			t.Fatalf("request %d: body %q, want %q", i, b, want)
		}
	}
	if n := onlyConn(t, tr).directWrites.Load(); n != 3 {
		t.Fatalf("%d requests written by their callers, want 3 (all but the first)", n)
	}
}

// A server that stops reading does not hold the callers: the socket takes
// what it can at once, the writer goroutine waits with the rest, and each
// request still ends with its context.
func TestStalledServerDoesNotHoldTheCaller(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		// Read the preface and the first request, answer it, so that the
		// client takes the server for one that speaks wire, then never
		// read again.
		r := bufio.NewReader(c)
		if _, err := io.ReadFull(r, make([]byte, len(Preface))); err != nil {
			return
		}
		if _, _, err := ReadFrame(r, nil, DefaultLimits().FrameBytesMax); err != nil {
			return
		}
		var b []byte
		b, _ = appendHead(b, 1, http.StatusOK, nil, DefaultLimits())
		b = appendFrame(b, FrameEnd, 1, nil)
		c.Write(b)
		accepted <- c
	}()
	tr := NewTransport(TransportConfig{})
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	resp, err := hc.Get("http://" + l.Addr().String() + "/first")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c := <-accepted
	defer c.Close()
	body := bytes.Repeat([]byte("x"), 1<<20)
	for i := range 16 {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, "PUT", "http://"+l.Addr().String()+"/big", bytes.NewReader(body))
		_, err := hc.Do(req)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("request %d: %v, want its context's deadline", i, err)
		}
	}
}

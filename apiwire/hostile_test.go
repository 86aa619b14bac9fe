package apiwire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestFrameHeaderAloneDoesNotAllocateItsLength: a header that claims a
// payload of megabytes, followed by a few bytes, makes the reader hold
// about what arrived, not what was claimed.
func TestFrameHeaderAloneDoesNotAllocateItsLength(t *testing.T) {
	var in bytes.Buffer
	in.Write(binary.BigEndian.AppendUint32(nil, 4<<20))
	in.Write(binary.BigEndian.AppendUint32(nil, 1))
	in.WriteByte(byte(FrameRequest))
	in.WriteString("only a few bytes")
	_, buf, err := ReadFrame(bufio.NewReader(&in), nil, 8<<20)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a frame cut short: %v, want io.ErrUnexpectedEOF", err)
	}
	if cap(buf) > readStep {
		t.Fatalf("a header claiming 4 MiB and 16 bytes of it: the reader holds %d bytes, want at most %d", cap(buf), readStep)
	}
}

// TestPartialFrameTimesOut: a client that sends a frame's header and then
// stalls is cut off after FrameTimeout, requests in flight or not.
func TestPartialFrameTimesOut(t *testing.T) {
	addr, _ := serve(t, echo, ServerConfig{FrameTimeout: 50 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b []byte
	b = append(b, Preface...)
	b = binary.BigEndian.AppendUint32(b, 100)
	b = binary.BigEndian.AppendUint32(b, 1)
	b = append(b, byte(FrameRequest))
	b = append(b, "ten bytes."...)
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second)) // only so that a failure does not hang
	_, err = c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the server kept a connection that stalled in the middle of a frame")
	}
	if err == nil {
		t.Fatal("the server answered a frame it never got whole")
	}
}

// flakyListener fails its first Accept with EMFILE.
type flakyListener struct {
	net.Listener
	failed bool
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if !l.failed {
		l.failed = true
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// TestListenerOutlivesEMFILE: running out of file descriptors once does
// not stop the listener (the node's API would stop with it).
func TestListenerOutlivesEMFILE(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(&flakyListener{Listener: inner}, ListenerConfig{SortTimeout: 10 * time.Second}, func(c net.Conn) { c.Close() })
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	got, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept after one EMFILE: %v", err)
	}
	got.Close()
}

// TestLogLimit: one line a second gets through; the next one says how
// many were withheld meanwhile.
func TestLogLimit(t *testing.T) {
	var l logLimit
	if n, ok := l.allow(); !ok || n != 0 {
		t.Fatalf("the first line: allowed %v, withheld before it %d", ok, n)
	}
	for range 3 {
		if _, ok := l.allow(); ok {
			t.Fatal("a second line within the second was allowed")
		}
	}
	l.last = l.last.Add(-2 * time.Second) // a second and more later
	if n, ok := l.allow(); !ok || n != 3 {
		t.Fatalf("a line a second later: allowed %v, withheld before it %d, want true and 3", ok, n)
	}
	var none *logLimit
	if _, ok := none.allow(); !ok {
		t.Fatal("a nil logLimit withheld a line")
	}
}

// TestRefusedRequestIsErrRefused: a request the server refused before
// serving it fails with an error wrapping ErrRefused (it had no effect:
// the client may send it again), unlike a lost answer.
func TestRefusedRequestIsErrRefused(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-release
		}
	})
	limits := DefaultLimits()
	limits.StreamsMax = 1
	addr, _ := serve(t, h, ServerConfig{Limits: limits})
	hc := client(t)
	held := holdRequest(hc, addr)
	<-entered
	_, err := hc.Get("http://" + addr + "/second")
	close(release)
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("a request over the server's stream limit: %v, want ErrRefused", err)
	}
	if err := <-held; err != nil {
		t.Fatalf("the request in flight: %v", err)
	}
}

// TestWaitForRequestsAfterDrain: Wait returns once the requests in flight
// at Drain have ended and their connections closed, and not before.
func TestWaitForRequestsAfterDrain(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		io.WriteString(w, "answered")
	})
	addr, ws := serve(t, h, ServerConfig{})
	hc := client(t)
	answered := make(chan error, 1)
	go func() {
		resp, err := hc.Get("http://" + addr + "/held")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		answered <- err
	}()
	<-entered
	ws.Drain()
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := ws.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with a request in flight: %v, want it to wait (DeadlineExceeded)", err)
	}
	close(release)
	if err := ws.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Fatalf("the request in flight at Drain: %v, want its answer", err)
	}
}

// TestStreamWaitThatEndsIsNotSent: a request whose context ends while it
// waits for one of its connection's streams (StreamsMax in flight) fails
// with ErrNotSent and its context's error, and the server never sees it:
// the caller knows it had no effect. Once a stream is free, the next
// request goes.
func TestStreamWaitThatEndsIsNotSent(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var waited atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hold":
			entered <- struct{}{}
			<-release
		case "/waited":
			waited.Add(1)
		}
	})
	addr, _ := serve(t, h, ServerConfig{})
	limits := DefaultLimits()
	limits.StreamsMax = 1
	tr := NewTransport(TransportConfig{Limits: limits})
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	held := holdRequest(hc, addr)
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+addr+"/waited", strings.NewReader("v"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = hc.Do(req)
	if !errors.Is(err, ErrNotSent) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request that waited in vain for a stream: %v, want ErrNotSent and DeadlineExceeded", err)
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("the request in flight: %v", err)
	}
	resp, err := hc.Get("http://" + addr + "/waited")
	if err != nil {
		t.Fatalf("a request once the stream is free: %v", err)
	}
	resp.Body.Close()
	if n := waited.Load(); n != 1 {
		t.Fatalf("the server saw %d requests to /waited, want 1 (the one sent once the stream was free)", n)
	}
}

// holdRequest sends GET /hold to addr on hc in the background: the
// channel gets its error once the request ends.
func holdRequest(hc *http.Client, addr string) <-chan error {
	held := make(chan error, 1)
	go func() {
		resp, err := hc.Get("http://" + addr + "/hold")
		if err == nil {
			resp.Body.Close()
		}
		held <- err
	}()
	return held
}

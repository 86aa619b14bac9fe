package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer accepts connections on loopback and writes back every line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// roundTrip writes a line and reads it back, giving up after wait.
func roundTrip(c net.Conn, r *bufio.Reader, wait time.Duration) (string, error) {
	if err := c.SetDeadline(time.Now().Add(wait)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestForwards(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	line, err := roundTrip(c, r, 10*time.Second)
	if !(err == nil && line == "ping\n") {
		t.Fatalf("round trip: %q, %v", line, err)
	}
	if got := p.Conns(); got != 1 {
		t.Fatalf("open connections: got %d, want 1", got)
	}
}

func TestCutResetsOpenConnections(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	_, err := roundTrip(c, r, 10*time.Second)
	if !(err != nil && !errors.Is(err, os.ErrDeadlineExceeded)) {
		t.Fatalf("after Cut: want a connection error, got %v", err)
	}

	c2, r2 := dial(t, p) // a cut is a moment: new connections work
	line, err := roundTrip(c2, r2, 10*time.Second)
	if !(err == nil && line == "ping\n") {
		t.Fatalf("after Cut, new connection: %q, %v", line, err)
	}
}

func TestBlackholeStallsThenDelivers(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	_, err := roundTrip(c, r, 200*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackholed: want a timeout, got %v", err)
	}

	p.Blackhole(false)
	// The held request arrives after the heal, and so does its echo.
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if !(err == nil && line == "ping\n") {
		t.Fatalf("after heal: %q, %v", line, err)
	}
}

func TestBlackholeHoldsNewConnections(t *testing.T) {
	p := newProxy(t)
	p.Blackhole(true)
	c, r := dial(t, p)
	_, err := roundTrip(c, r, 200*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackholed new connection: want a timeout, got %v", err)
	}
	p.Blackhole(false)
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if !(err == nil && line == "ping\n") {
		t.Fatalf("after heal: %q, %v", line, err)
	}
}

func TestCutDuringBlackholeEndsTheLink(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	_, _ = roundTrip(c, r, 100*time.Millisecond)
	p.Cut()
	p.Blackhole(false)
	_, err := roundTrip(c, r, 10*time.Second)
	if !(err != nil && !errors.Is(err, os.ErrDeadlineExceeded)) {
		t.Fatalf("cut while blackholed: want a connection error, got %v", err)
	}
}

func TestRejectRefusesNewConnections(t *testing.T) {
	p := newProxy(t)
	p.Reject(true)
	// The reset may come before or after the kernel lets the dial return.
	c, err := net.Dial("tcp", p.Addr())
	if err == nil {
		_, err = roundTrip(c, bufio.NewReader(c), 10*time.Second)
		c.Close()
	}
	if !(err != nil && !errors.Is(err, os.ErrDeadlineExceeded)) {
		t.Fatalf("rejected: want a connection error, got %v", err)
	}
	p.Reject(false)
	c2, r2 := dial(t, p)
	line, err := roundTrip(c2, r2, 10*time.Second)
	if !(err == nil && line == "ping\n") {
		t.Fatalf("after Reject(false): %q, %v", line, err)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	if err := p.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

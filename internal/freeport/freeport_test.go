package freeport

import (
	"net"
	"strconv"
	"testing"
)

// Ports are distinct, below the ephemeral range, and bindable.
func TestPortsAreDistinctFreeAndBelowTheEphemeralRange(t *testing.T) {
	low, err := ephemeralLow()
	if err != nil {
		t.Skipf("no ephemeral range here: %v", err)
	}
	seen := map[int]bool{}
	for range 50 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if low-lowest >= minSpan && (p < lowest || p >= low) {
			t.Errorf("port %d outside [%d, %d)", p, lowest, low)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d cannot be bound: %v", p, err)
			continue
		}
		l.Close()
	}
}

// A port somebody listens on is never handed out; once free, it is.
func TestSkipsTakenPorts(t *testing.T) {
	p, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	delete(given, p) // so that only the bind check can refuse it
	mu.Unlock()
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := pick(p, p+1); err == nil {
		t.Errorf("pick returned port %d, which is listened on", got)
	}
	l.Close()
	if got, err := pick(p, p+1); err != nil || got != p {
		t.Errorf("pick after the listener closed = %d, %v; want %d", got, err, p)
	}
	if got, err := pick(p, p+1); err == nil {
		t.Errorf("pick handed out port %d a second time", got)
	}
}

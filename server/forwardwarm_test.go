package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// dialCounter is an HTTP client that counts the connections it makes, by
// address, and the answers it has finished reading (their bodies closed,
// the connection back in the pool), and tells a waiter of each.
type dialCounter struct {
	client *http.Client
	mu     sync.Mutex
	dials  map[string]int
	done   map[string]int
	wake   chan struct{}
}

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// closeHook calls onClose after the body it wraps is closed.
type closeHook struct {
	io.ReadCloser
	onClose func()
}

func (c closeHook) Close() error {
	err := c.ReadCloser.Close()
	c.onClose()
	return err
}

func (d *dialCounter) bump(m map[string]int, addr string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m[addr]++
	close(d.wake)
	d.wake = make(chan struct{})
}

func newDialCounter() *dialCounter {
	d := &dialCounter{dials: map[string]int{}, done: map[string]int{}, wake: make(chan struct{})}
	var dialer net.Dialer
	tr := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d.bump(d.dials, addr)
			return dialer.DialContext(ctx, network, addr)
		}}
	d.client = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := tr.RoundTrip(r)
		if err == nil {
			resp.Body = closeHook{resp.Body, func() { d.bump(d.done, r.URL.Host) }}
		}
		return resp, err
	})}
	return d
}

func (d *dialCounter) count(addr string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials[addr]
}

// waitWarm waits until n answers from addr were read to their end,
// failing the test after a generous wait.
func (d *dialCounter) waitWarm(t *testing.T, addr string, want int) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		d.mu.Lock()
		n, wake := d.done[addr], d.wake
		d.mu.Unlock()
		if n >= want {
			return
		}
		select {
		case <-wake:
		case <-deadline:
			t.Fatalf("no answer from %s within 20s", addr)
		}
	}
}

// A follower holds a connection to every other member's API before it
// has anything to forward: the first request it forwards to a new leader
// goes over that connection, with no new handshake.
func TestFollowerWarmsItsConnectionToANewLeader(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	clients := map[uint64]*dialCounter{}
	for id, n := range c.nodes {
		if id != leader {
			clients[id] = newDialCounter()
			go n.warmForwarding(clients[id].client, "http")
		}
	}
	for id, d := range clients {
		for peer := range c.nodes {
			if peer != id {
				d.waitWarm(t, c.https[peer].Addr().String(), 1)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	to, err := c.nodes[leader].HandOver(ctx)
	if err != nil {
		t.Fatalf("HandOver: %v", err)
	}
	var other uint64 // the follower that did not take over
	for id := range clients {
		if id != to {
			other = id
		}
	}
	newAddr := c.https[to].Addr().String()
	d := clients[other]
	// The warm-up of every member, then that of the new leader when it
	// took over (its connection could have died meanwhile).
	d.waitWarm(t, newAddr, 2)
	api := httptest.NewServer(NewAPI(c.nodes[other].Node, APIConfig{Client: d.client, Logger: quiet}))
	defer api.Close()
	req, _ := http.NewRequestWithContext(ctx, "PUT", api.URL+"/v1/kv/warm", strings.NewReader("v"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("forwarded write: %s", resp.Status)
	}
	if n := d.count(newAddr); n != 1 {
		t.Fatalf("node %d made %d connections to the new leader's API, want 1 (the warm one, reused by the forward)", other, n)
	}
}

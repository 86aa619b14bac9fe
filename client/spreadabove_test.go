package client

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

// heldClient returns a client of endpoints, in that order, with
// Config.SpreadAbove above, that has learned which node answers where,
// and whose requests for path (as the client sends it) wait in its
// transport until release is closed; each one held sends on held first.
func heldClient(t *testing.T, above int, path string, held chan<- struct{}, release <-chan struct{}, endpoints ...string) *Client {
	t.Helper()
	cfg := DefaultConfig(endpoints...)
	cfg.SpreadAbove = above
	next := NewTransport(cfg)
	cfg.HTTPClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Path == path {
			held <- struct{}{}
			<-release
		}
		return next.RoundTrip(r)
	})}
	cl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl.warmUp(testContext(t))
	return cl
}

// followersFirst returns the cluster's HTTP addresses, the followers'
// first: a request that spreads starts at a follower's turn.
func followersFirst(c *testCluster, leader uint64) []string {
	var order []string
	for id, ep := range c.https {
		if id != leader {
			order = append(order, ep)
		}
	}
	return append(order, c.https[leader])
}

// TestSpreadAboveLoneCallerGoesToTheLeader: under Config.SpreadAbove a
// caller with one request in flight at a time sends every write and read
// to the leader, though the followers' turns come first, and a watch
// held open meanwhile does not count as a request in flight.
func TestSpreadAboveLoneCallerGoesToTheLeader(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.leader()
	order := followersFirst(c, leader)
	cl := heldClient(t, 1, "/none", nil, nil, order...)
	ctx := testContext(t)
	arrived := c.awaitLeader("/v1/watch/kv/lone-watch")
	watched := make(chan error, 1)
	go func() {
		_, err := cl.WatchKey(ctx, "lone-watch", 0, time.Minute)
		watched <- err
	}()
	within(t, arrived, "the watch at the leader")
	const rounds = 20
	for i := range rounds {
		if _, err := cl.Put(ctx, "lone", []byte("v")); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		if _, err := cl.Get(ctx, "lone"); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
	}
	if got := c.servedAt(c.https[leader], "/v1/kv/lone"); got != 2*rounds {
		t.Fatalf("the leader took %d of %d puts and gets, want all: a lone caller must not spread", got, 2*rounds)
	}
	if _, err := cl.Put(ctx, "lone-watch", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := within(t, watched, "the watch's answer"); err != nil {
		t.Fatalf("watch: %v", err)
	}
}

// TestSpreadAboveBusyClientSpreads: under Config.SpreadAbove 2, with two
// puts held in flight, a third request spreads (it goes to the first
// follower in turn) and succeeds; once the held ones are answered, the
// next goes to the leader again.
func TestSpreadAboveBusyClientSpreads(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.leader()
	order := followersFirst(c, leader)
	held, release := make(chan struct{}), make(chan struct{})
	cl := heldClient(t, 2, "/v1/kv/held", held, release, order...)
	ctx := testContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cl.Put(ctx, "held", []byte("v"))
			errs <- err
		}()
	}
	within(t, held, "the first held put")
	within(t, held, "the second held put")
	if _, err := cl.Put(ctx, "busy", []byte("v")); err != nil {
		t.Fatalf("put with two in flight: %v", err)
	}
	if got := c.servedAt(order[0], "/v1/kv/busy"); got != 1 {
		t.Fatalf("the first follower took %d of the busy client's put, want it (the leader took %d)",
			got, c.servedAt(c.https[leader], "/v1/kv/busy"))
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("held put: %v", err)
		}
	}
	if got := c.servedAt(c.https[leader], "/v1/kv/held"); got != 2 {
		t.Fatalf("the leader took %d of the 2 held puts, want both: they went out with 1 and 2 in flight", got)
	}
	if _, err := cl.Put(ctx, "busy", []byte("w")); err != nil {
		t.Fatal(err)
	}
	if got := c.servedAt(c.https[leader], "/v1/kv/busy"); got != 1 {
		t.Fatalf("the leader took %d puts of busy, want the one sent alone", got)
	}
}

// TestSpreadAboveBusyClientWithAStoppedMember: a follower is stopped; a
// client with Config.SpreadAbove 1 and eight callers writing at once
// spreads over the live members, and every write succeeds and applies
// once.
func TestSpreadAboveBusyClientWithAStoppedMember(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.leader()
	order := followersFirst(c, leader)
	dead, live := order[0], order[1]
	for id, ep := range c.https {
		if ep == dead {
			c.kill(id)
		}
	}
	cl := heldClient(t, 1, "/none", nil, nil, order...)
	ctx := testContext(t)
	const callers, puts = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, callers*puts)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range puts {
				if _, err := cl.Put(ctx, "stopped", []byte{byte(i), byte(j)}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("put with a member stopped: %v", err)
	}
	kv, err := cl.Get(ctx, "stopped")
	if err != nil {
		t.Fatal(err)
	}
	if kv.Version != callers*puts {
		t.Fatalf("the key is at version %d after %d puts, want each applied once", kv.Version, callers*puts)
	}
	if got := c.servedAt(live, "/v1/kv/stopped"); got == 0 {
		t.Fatalf("the live follower took none of %d puts from %d callers at once: the busy client did not spread", callers*puts, callers)
	}
}

package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// campaigning is a fake replica that campaigns: AwaitElection tells the
// test it waits, then waits until the test ends the election.
type campaigning struct {
	*fakeReplica
	awaiting chan struct{}
	decided  chan struct{}
}

func (c *campaigning) AwaitElection(ctx context.Context) {
	c.awaiting <- struct{}{}
	select {
	case <-c.decided:
	case <-ctx.Done():
	}
}

// A write that reaches a node while it campaigns (no leader known) waits
// for the election's outcome, and the node that won applies it, instead
// of refusing it for want of a leader (503, and the client tries
// elsewhere and backs off).
func TestWriteToACandidateWaitsForTheOutcome(t *testing.T) {
	f := &campaigning{fakeReplica: newFake(1, 0), awaiting: make(chan struct{}, 1), decided: make(chan struct{})}
	srv := httptest.NewServer(NewAPI(f, APIConfig{Logger: quiet}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	status := putAsync(ctx, t, srv.URL+"/v1/kv/campaign", "v")
	select {
	case <-f.awaiting:
	case <-ctx.Done():
		t.Fatal("the write did not wait for the election")
	}
	f.mu.Lock()
	f.leader = f.id // it won
	f.mu.Unlock()
	close(f.decided)
	if got := <-status; got != http.StatusOK {
		t.Fatalf("write sent while the node campaigned: %d, want 200 (it won, and applies it)", got)
	}
	if kv, ok := f.m.Get("campaign"); !ok || string(kv.Value) != "v" {
		t.Fatalf("campaign = %+v, %v; want v applied", kv, ok)
	}
}

// putAsync sends a PUT of value to url on its own goroutine and returns
// the channel its status code arrives on (0 if the request failed, which
// also fails the test).
func putAsync(ctx context.Context, t *testing.T, url, value string) <-chan int {
	status := make(chan int, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, "PUT", url, strings.NewReader(value))
		if err != nil {
			t.Error(err)
			status <- 0
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			status <- 0
			return
		}
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	return status
}

package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"coord/api"
)

// failingReplica is a fakeReplica whose Propose fails with err.
type failingReplica struct {
	*fakeReplica
	err error
}

func (f failingReplica) Propose(context.Context, Command) (Result, error) { return Result{}, f.err }

// follower serves the API of a follower whose leader (node 1) is at
// leaderAddr.
func follower(t *testing.T, leaderAddr string) string {
	t.Helper()
	f := newFake(2, 1)
	f.members = []api.Member{{ID: 1, HTTP: leaderAddr, Voter: true}, {ID: 2, Voter: true}}
	s := httptest.NewServer(NewAPI(f, APIConfig{Logger: quiet}))
	t.Cleanup(s.Close)
	return s.URL
}

// A write forwarded to a leader that received all of it and then vanished
// may have been applied: unknown_outcome, never unavailable. A leader that
// could not even be reached did not apply it: unavailable.
func TestForwardFailureAfterSendingIsUnknownOutcome(t *testing.T) {
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // the whole request arrived: the leader could act on it
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close() // and dies before it answers
		}
	}))
	t.Cleanup(leader.Close)
	u := follower(t, strings.TrimPrefix(leader.URL, "http://"))
	r := call(t, "PUT", u+"/v1/kv/k?client_id=7&seq=1", "v").want(t, 503)
	if r.body["code"] != "unknown_outcome" {
		t.Fatalf("forward lost after sending: %v, want unknown_outcome", r.body)
	}
	// Reads change nothing: a lost forward of a read is just unavailable.
	if r := call(t, "GET", u+"/v1/kv/k", "").want(t, 503); r.body["code"] != "unavailable" {
		t.Fatalf("read forward lost: %v, want unavailable", r.body)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close() // nothing listens: the connection is refused, nothing was sent
	u = follower(t, closed)
	if r := call(t, "PUT", u+"/v1/kv/k", "v").want(t, 503); r.body["code"] != "unavailable" {
		t.Fatalf("forward to a leader that refuses connections: %v, want unavailable", r.body)
	}
}

// Every way the node can lose track of a proposed write answers
// unknown_outcome; refusals before proposing answer what they are.
func TestProposeErrorsMapToCodes(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("%w: leadership lost", ErrOutcomeUnknown), 503, "unknown_outcome"},
		{fmt.Errorf("%w: %w", ErrOutcomeUnknown, context.DeadlineExceeded), 503, "unknown_outcome"},
		{fmt.Errorf("%w: %w", ErrOutcomeUnknown, ErrStopped), 503, "unknown_outcome"},
		{fmt.Errorf("%w: write: %w", ErrStorage, syscall.ENOSPC), 507, "disk_full"},
		{fmt.Errorf("%w: sync: %w", ErrStorage, syscall.EIO), 503, "storage_failed"},
		{fmt.Errorf("%w: refused", ErrNotLeader), 503, "unavailable"},
		{errors.New("something else"), 500, "internal"},
	}
	for _, tt := range tests {
		f := failingReplica{newFake(1, 1), tt.err}
		s := httptest.NewServer(NewAPI(f, APIConfig{Logger: quiet}))
		// Without a session, so that nothing is forwarded: the node's own
		// answer is the one checked.
		r := call(t, "PUT", s.URL+"/v1/kv/k", "v")
		s.Close()
		if r.code != tt.status || r.body["code"] != tt.code {
			t.Errorf("Propose error %v: answered %d %v, want %d %s", tt.err, r.code, r.body["code"], tt.status, tt.code)
		}
		if tt.status >= 503 && r.header.Get("Retry-After") == "" {
			t.Errorf("Propose error %v: no Retry-After", tt.err)
		}
	}
}

// A leader that proposed a write in a session and lost leadership passes
// it on to the new leader; when it cannot (the request was forwarded to it
// already, so it must not forward again), the answer is unknown_outcome:
// the write is in some log.
func TestUnknownOutcomeNotForwardableStaysUnknown(t *testing.T) {
	f := failingReplica{newFake(1, 1), fmt.Errorf("%w: leadership lost", ErrOutcomeUnknown)}
	s := httptest.NewServer(NewAPI(f, APIConfig{Logger: quiet}))
	t.Cleanup(s.Close)
	req, err := http.NewRequest("PUT", s.URL+"/v1/kv/k?client_id=9&seq=1", strings.NewReader("v"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(api.HeaderForwarded, "2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), `"unknown_outcome"`) {
		t.Fatalf("answered %d %s, want 503 unknown_outcome", resp.StatusCode, body)
	}
}

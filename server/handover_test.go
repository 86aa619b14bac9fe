package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"coord/api"
	"coord/raft"
)

// A leader asked to hand over transfers leadership to a follower, which
// takes it over in the next term, and HandOver returns once the old
// leader follows it. Without the transfer the old leader would lead on
// and HandOver would run out of time.
func TestHandOverTransfersLeadership(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	before := c.nodes[leader].Status()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	to, err := c.nodes[leader].HandOver(ctx)
	if err != nil {
		t.Fatalf("HandOver: %v", err)
	}
	if to == 0 || to == leader {
		t.Fatalf("handed over to %d, leader %d", to, leader)
	}
	// HandOver may return on the new leader's first request, before the
	// old leader's status shows it: every node comes to name it.
	if got := c.waitLeader(); got != to {
		t.Fatalf("the nodes agree on leader %d, HandOver said %d took over", got, to)
	}
	if st := c.nodes[leader].Status(); st.Term <= before.Term {
		t.Fatalf("term %d after the hand-over, %d before", st.Term, before.Term)
	}
}

// A leader handing over learns who took over from the first leader's
// request of a later term: an append, a heartbeat or a snapshot, from its
// sender. Answers, votes, TimeoutNow and requests of the term it led or an
// earlier one say nothing.
func TestLeaderSeenByALaterTermsRequest(t *testing.T) {
	seen := newLeaderSeen(5, 3)
	for _, m := range []raft.Message{
		{Type: raft.MsgAppendRequest, From: 2, Term: 5},
		{Type: raft.MsgHeartbeatRequest, From: 2, Term: 4},
		{Type: raft.MsgAppendResponse, From: 2, Term: 6},
		{Type: raft.MsgVoteRequest, From: 3, Term: 6},
		{Type: raft.MsgVoteResponse, From: 3, Term: 6},
		{Type: raft.MsgTimeoutNow, From: 3, Term: 6},
		{Type: raft.MsgAppendRequest, From: 0, Term: 6},
	} {
		seen.observe(m)
		select {
		case <-seen.done:
			t.Fatalf("%v taken for a later leader's request", m)
		default:
		}
	}
	for _, typ := range []raft.MessageType{raft.MsgAppendRequest, raft.MsgHeartbeatRequest, raft.MsgSnapshotRequest} {
		seen := newLeaderSeen(5, 3)
		seen.observe(raft.Message{Type: typ, From: 3, Term: 6})
		seen.observe(raft.Message{Type: typ, From: 2, Term: 7})
		select {
		case <-seen.done:
		default:
			t.Fatalf("a %v of term 6 not taken for a later leader's request", typ)
		}
		if id, term := seen.leader(); id != 3 || term != 6 {
			t.Errorf("after a %v: leader %d of term %d, want 3 of term 6 (the first seen)", typ, id, term)
		}
	}
}

// The target campaigning on the leader's TimeoutNow shows as its vote
// request of a later term, marked as a transfer's: not another node's, not
// a pre-vote, not one of the term the leader led, not one without the mark
// (an election of its own).
func TestTargetSeenCampaigning(t *testing.T) {
	seen := newLeaderSeen(5, 3)
	for _, m := range []raft.Message{
		{Type: raft.MsgVoteRequest, From: 2, Term: 6, Transfer: true},
		{Type: raft.MsgPreVoteRequest, From: 3, Term: 6, Transfer: true},
		{Type: raft.MsgVoteRequest, From: 3, Term: 5, Transfer: true},
		{Type: raft.MsgVoteRequest, From: 3, Term: 6},
		{Type: raft.MsgAppendRequest, From: 3, Term: 5},
	} {
		seen.observe(m)
		select {
		case <-seen.campaigning:
			t.Fatalf("%+v taken for the target campaigning", m)
		default:
		}
	}
	seen.observe(raft.Message{Type: raft.MsgVoteRequest, From: 3, Term: 6, Transfer: true})
	seen.observe(raft.Message{Type: raft.MsgVoteRequest, From: 3, Term: 7, Transfer: true}) // closes nothing twice
	select {
	case <-seen.campaigning:
	default:
		t.Fatal("the target's vote request of term 6 not taken for it campaigning")
	}
	select {
	case <-seen.done:
		t.Fatal("a vote request taken for a leader's request")
	default:
	}
}

// A node that does not lead has nothing to hand over.
func TestHandOverOnAFollowerDoesNothing(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	to, err := c.follower(leader).HandOver(context.Background())
	if err != nil || to != 0 {
		t.Fatalf("HandOver on a follower = %d, %v; want 0, nil", to, err)
	}
}

// The target is the voter that holds the most of the leader's log among
// those that answered lately; the leader, learners and silent voters come
// after.
func TestMostUpToDate(t *testing.T) {
	all := func(uint64) bool { return true }
	st := raft.Status{ID: 1, Conf: raft.ConfState{Voters: []uint64{1, 2, 3, 4}, Learners: []uint64{5}}}
	st.Progress = map[uint64]raft.Progress{
		1: {Match: 100, Next: 101, RecentActive: true},
		2: {Match: 90, Next: 91, RecentActive: true},
		3: {Match: 95, Next: 96, RecentActive: true},
		4: {Match: 99, Next: 100},
		5: {Match: 100, Next: 101, RecentActive: true},
	}
	if got := mostUpToDate(st, all); got != 3 {
		t.Errorf("mostUpToDate = %d, want 3 (the most up-to-date voter that answers)", got)
	}
	st.Progress[2] = raft.Progress{Match: 95, Next: 96, RecentActive: true}
	if got := mostUpToDate(st, all); got != 2 {
		t.Errorf("mostUpToDate = %d, want 2 (the lowest ID among equals)", got)
	}
	for _, id := range []uint64{2, 3} {
		pr := st.Progress[id]
		pr.RecentActive = false
		st.Progress[id] = pr
	}
	if got := mostUpToDate(st, all); got != 4 {
		t.Errorf("mostUpToDate = %d, want 4 (none answers lately: the most up-to-date)", got)
	}
	if got := mostUpToDate(st, func(id uint64) bool { return id != 4 }); got != 2 {
		t.Errorf("mostUpToDate = %d, want 2 (4 is not connected)", got)
	}
	if got := mostUpToDate(raft.Status{ID: 1, Conf: raft.ConfState{Voters: []uint64{1}}}, all); got != 0 {
		t.Errorf("mostUpToDate of a single node = %d, want 0", got)
	}
}

// When the whole cluster stops, a leader whose followers are gone has no
// one to hand over to, and says so at once rather than wait out its bound.
func TestHandOverWithTheFollowersGone(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	l := c.nodes[leader]
	for id := range c.nodes {
		if id != leader {
			c.crash(id)
		}
	}
	for _, id := range []uint64{1, 2, 3} {
		if id != leader {
			waitPeerState(t, l, id, false)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	to, err := l.HandOver(ctx)
	if err != nil || to != 0 {
		t.Fatalf("HandOver with no follower = %d, %v; want 0, nil", to, err)
	}
}

// Once a leader has handed leadership over and is stopping, its API
// refuses every request at once, naming the new leader, and closes the
// connection; an idle keep-alive connection is closed at once too, not on
// the client's next request. Before, it serves as usual.
func TestHandedOverNodeNamesTheNewLeader(t *testing.T) {
	c := newTestCluster(t, 3)
	leader, old, drain, held, srv := serveDrained(t, c)

	// An idle keep-alive connection, made before the hand-over.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: coord\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("before the hand-over: %s, close %v; want 200 on a kept-alive connection", resp.Status, resp.Close)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A write that arrives once the transfer began waits for its end
	// (the node still leads: passed on, it would be refused or, before
	// the core's transfer starts, applied here).
	drain.begin()
	put := func() (*http.Response, api.ErrorResponse) {
		req, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL+"/v1/kv/handed-over", strings.NewReader("v"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return nil, api.ErrorResponse{}
		}
		defer resp.Body.Close()
		var body api.ErrorResponse
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Error(err)
		}
		return resp, body
	}
	type answer struct {
		resp *http.Response
		body api.ErrorResponse
	}
	during := make(chan answer, 1)
	go func() {
		resp, body := put()
		during <- answer{resp, body}
	}()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the write sent during the transfer was not held")
	}
	next, err := old.HandOver(ctx)
	if err != nil {
		t.Fatalf("HandOver: %v", err)
	}
	drain.end(srv.Config, next)

	// The idle connection is closed by the server: EOF, not the deadline.
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection after the hand-over: read %v, want EOF (closed by the server)", err)
	}

	var held0 answer
	select {
	case held0 = <-during:
	case <-ctx.Done():
		t.Fatal("the held write was not answered when the transfer ended")
	}
	resp2, body := put()
	for _, a := range []struct {
		what string
		answer
	}{{"write held during the transfer", held0}, {"write after the hand-over", answer{resp2, body}}} {
		resp, body := a.resp, a.body
		if resp == nil {
			t.Fatalf("%s: no answer", a.what)
		}
		if resp.StatusCode != http.StatusServiceUnavailable || body.Code != api.CodeUnavailable {
			t.Fatalf("%s: %s %q, want 503 unavailable", a.what, resp.Status, body.Code)
		}
		want := strconv.FormatUint(next, 10)
		if got := resp.Header.Get(api.HeaderLeader); next == leader || got != want || body.Leader == nil || *body.Leader != next {
			t.Fatalf("%s names leader %q (body %v), want the new leader %d (old %d)", a.what, got, body.Leader, next, leader)
		}
		if !resp.Close {
			t.Fatalf("%s: the answer keeps the connection open; want Connection: close", a.what)
		}
		if resp.Header.Get(api.HeaderRetryAfter) != "" {
			t.Fatalf("%s: the answer asks the client to wait (Retry-After); it should go to the new leader at once", a.what)
		}
	}
}

// A write held during a transfer that fails is passed on: the node still
// leads, and applies it.
func TestFailedHandOverPassesHeldWritesOn(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	drain := newHandedOver(NewAPI(c.nodes[leader].Node, APIConfig{Logger: quiet}), c.nodes[leader].Node)
	held := make(chan struct{}, 1)
	drain.held = func() { held <- struct{}{} }
	srv := httptest.NewServer(drain)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	drain.begin()
	status := putAsync(ctx, t, srv.URL+"/v1/kv/held", "v")
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the write was not held")
	}
	drain.end(srv.Config, 0)
	if got := <-status; got != http.StatusOK {
		t.Fatalf("held write after a failed hand-over: %d, want 200 (the node still leads)", got)
	}
}

// The writes a stopping leader holds are answered as soon as the target
// campaigns on its TimeoutNow (its vote request arrives), naming the
// target, a round of votes before its first append would; sent there at
// once, a write is held by the candidate and appended with its first
// entry (ProposeAtElection), or, if it came after the win, proposed as
// usual: either way it succeeds.
func TestHeldWritesGoToTheTargetWhenItCampaigns(t *testing.T) {
	c := newTestCluster(t, 3)
	_, old, drain, held, srv := serveDrained(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	put := func(url string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "PUT", url+"/v1/kv/early", strings.NewReader("v"))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	drain.begin()
	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := put(srv.URL)
		if err != nil {
			t.Error(err)
		}
		answered <- resp
	}()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the write sent during the transfer was not held")
	}
	// When the target campaigns, the held write is answered before
	// handOver returns, naming the target; the writer retries there.
	retried := make(chan int, 1)
	var target uint64
	next, err := old.handOver(ctx, func(to uint64) {
		target = to
		drain.early(to)
		resp := <-answered
		if resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(api.HeaderLeader) != strconv.FormatUint(to, 10) {
			t.Errorf("the held write, when the target campaigns: %v, want 503 naming node %d", resp, to)
		}
		go func() {
			resp, err := put(c.nodes[to].httpURL)
			if err != nil {
				t.Error(err)
				retried <- 0
				return
			}
			retried <- resp.StatusCode
		}()
	})
	if err != nil {
		t.Fatalf("handOver: %v", err)
	}
	drain.end(srv.Config, next)
	if target == 0 || next != target {
		t.Fatalf("target campaigned: %d; took over: %d", target, next)
	}
	if got := <-retried; got != http.StatusOK {
		t.Fatalf("the write retried at the target: %d, want 200", got)
	}
	if got := c.waitLeader(); got != target {
		t.Fatalf("leader %d after the hand-over, want %d", got, target)
	}
}

// serveDrained serves the API of c's leader over HTTP through a
// handedOver, as Serve does; held receives once a write is held by it.
// The server is closed when the test ends.
func serveDrained(t *testing.T, c *testCluster) (leader uint64, old *Node, drain *handedOver, held chan struct{}, srv *httptest.Server) {
	t.Helper()
	leader = c.waitLeader()
	old = c.nodes[leader].Node
	drain = newHandedOver(NewAPI(old, APIConfig{Logger: quiet}), old)
	held = make(chan struct{}, 1)
	drain.held = func() { held <- struct{}{} }
	srv = httptest.NewServer(drain)
	t.Cleanup(srv.Close)
	return leader, old, drain, held, srv
}

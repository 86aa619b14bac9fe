package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"coord/api"
)

// fakeReplica is a one-process stand-in for a cluster node, for testing the
// HTTP layer alone: the leader applies commands to its machine at once;
// followers refuse with ErrNotLeader. Its state is real (a Machine), only
// replication is missing.
type fakeReplica struct {
	mu      sync.Mutex
	id      uint64
	leader  uint64
	members []api.Member
	m       *Machine
	index   uint64
	changed chan struct{}
	watches watchIndex
	// barrier, if set, runs in ReadBarrier on the leader: what the
	// barrier applies (a write committed before the read began).
	barrier func()
}

func newFake(id, leader uint64) *fakeReplica {
	return &fakeReplica{id: id, leader: leader, m: NewMachine(DefaultLimits()), changed: make(chan struct{})}
}

func (f *fakeReplica) Propose(_ context.Context, cmd Command) (Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leader != f.id {
		return Result{}, ErrNotLeader
	}
	f.index++
	r := f.m.Apply(f.index, cmd.Marshal())
	close(f.changed)
	f.changed = make(chan struct{})
	if w, ok := watchedBy(cmd); ok && r.Status == StatusOK {
		f.watches.changed(w)
	}
	wakeBatch(&f.watches, cmd, r)
	return r, nil
}

func (f *fakeReplica) ReadBarrier(context.Context) error {
	f.mu.Lock()
	leading, barrier := f.leader == f.id, f.barrier
	f.mu.Unlock()
	if !leading {
		return ErrNotLeader
	}
	if barrier != nil {
		barrier()
	}
	return nil
}

type fakeView struct{ f *fakeReplica }

func (v fakeView) Get(key string) (KeyValue, bool) { return v.f.m.Get(key) }
func (v fakeView) Lease(name string) Lease         { return v.f.m.Lease(name) }
func (v fakeView) Token(hash [TokenHashBytes]byte) (Token, bool) {
	return v.f.m.TokenByHash(hash)
}
func (v fakeView) Tokens() []Token { return v.f.m.Tokens() }
func (v fakeView) Remaining(name string) (time.Duration, bool) {
	return v.f.m.Lease(name).TTL, v.f.leader == v.f.id
}

func (f *fakeReplica) View(fn func(View)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(fakeView{f})
}

func (f *fakeReplica) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

func (f *fakeReplica) ChangedOf(w Watched) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watches.wait(w)
}

func (f *fakeReplica) Leader() (self, leader uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.id, f.leader
}

func (f *fakeReplica) Status() api.NodeStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	role := api.RoleFollower
	if f.leader == f.id {
		role = api.RoleLeader
	}
	return api.NodeStatus{ID: f.id, Role: role, Term: 1, Leader: f.leader, Commit: f.index, Applied: f.index, Members: f.members}
}

func (f *fakeReplica) AddMember(context.Context, uint64, string) error { return nil }
func (f *fakeReplica) RemoveMember(context.Context, uint64) error      { return nil }

// pair is a leader and a follower API that knows the leader's address.
type pair struct {
	leader, follower     *fakeReplica
	leaderURL, followURL string
	metrics              *Metrics
}

func newPair(t *testing.T) *pair {
	return newPairOf(t, APIConfig{Metrics: NewMetrics()}, APIConfig{})
}

// newPairOf is newPair with these API configurations for the leader and
// the follower; the pair's metrics are the leader's.
func newPairOf(t *testing.T, leaderCfg, followerCfg APIConfig) *pair {
	p := &pair{leader: newFake(1, 1), follower: newFake(2, 1), metrics: leaderCfg.Metrics}
	ls := httptest.NewServer(NewAPI(p.leader, leaderCfg))
	fs := httptest.NewServer(NewAPI(p.follower, followerCfg))
	t.Cleanup(ls.Close)
	t.Cleanup(fs.Close)
	p.leaderURL, p.followURL = ls.URL, fs.URL
	members := []api.Member{
		{ID: 1, HTTP: strings.TrimPrefix(ls.URL, "http://"), Voter: true},
		{ID: 2, HTTP: strings.TrimPrefix(fs.URL, "http://"), Voter: true},
	}
	p.leader.members, p.follower.members = members, members
	return p
}

type reply struct {
	code   int
	header http.Header
	body   map[string]any
}

func call(t *testing.T, method, url, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{code: resp.StatusCode, header: resp.Header}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			t.Fatalf("%s %s: bad JSON %q: %v", method, url, raw, err)
		}
	}
	return r
}

func (r reply) want(t *testing.T, code int) reply {
	t.Helper()
	if r.code != code {
		t.Fatalf("status %d, want %d: %v", r.code, code, r.body)
	}
	return r
}

func (r reply) num(field string) uint64 {
	f, _ := r.body[field].(float64)
	return uint64(f)
}

func TestAPIKeysWithRevisionsAndCAS(t *testing.T) {
	p := newPair(t)
	u := p.leaderURL + "/v1/kv/dir/x"
	call(t, "GET", u, "").want(t, 404)
	r1 := call(t, "PUT", u+"?prev_revision=0", "one").want(t, 200).num("revision")
	conflict := call(t, "PUT", u+"?prev_revision=0", "two").want(t, 409)
	if conflict.body["code"] != "conflict" || conflict.num("revision") != r1 {
		t.Fatalf("conflict body %v, want revision %d", conflict.body, r1)
	}
	r2 := call(t, "PUT", fmt.Sprintf("%s?prev_revision=%d", u, r1), "two").want(t, 200).num("revision")
	got := call(t, "GET", u, "").want(t, 200)
	if got.body["value"] != "two" || got.num("revision") != r2 || got.body["key"] != "dir/x" {
		t.Fatalf("get %v", got.body)
	}
	call(t, "DELETE", u, "").want(t, 200)
	call(t, "DELETE", u, "").want(t, 404)
}

func TestAPIForwardsToTheLeader(t *testing.T) {
	p := newPair(t)
	u := p.followURL + "/v1/kv/k"
	call(t, "PUT", u, "v").want(t, 200)
	// A linearizable read on the follower is answered by the leader...
	got := call(t, "GET", u, "").want(t, 200)
	if got.body["value"] != "v" {
		t.Fatalf("forwarded get %v", got.body)
	}
	// ...and says so: the node asked, and the leader it forwarded to, as a
	// client needs to find the leader.
	if n, l := got.header.Get(api.HeaderNode), got.header.Get(api.HeaderLeader); n != "2" || l != "1" {
		t.Fatalf("forwarded answer: %s %q, %s %q; want 2 and 1", api.HeaderNode, n, api.HeaderLeader, l)
	}
	// ...while a stale read is the follower's own state, which this fake
	// never replicates to.
	call(t, "GET", u+"?stale=true", "").want(t, 404)
}

func TestAPIForwardsOnlyOnce(t *testing.T) {
	p := newPair(t)
	// The leader steps down and believes the follower leads: a request must
	// not bounce between them.
	p.leader.mu.Lock()
	p.leader.leader = 2
	p.leader.mu.Unlock()
	r := call(t, "PUT", p.followURL+"/v1/kv/k", "v").want(t, 503)
	if r.body["code"] != "unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("body %v, headers %v", r.body, r.header)
	}
}

func TestAPINoLeaderIsUnavailable(t *testing.T) {
	p := newPair(t)
	p.follower.mu.Lock()
	p.follower.leader = 0
	p.follower.mu.Unlock()
	if r := call(t, "PUT", p.followURL+"/v1/kv/k", "v").want(t, 503); r.header.Get("Retry-After") == "" {
		t.Fatalf("no Retry-After: %v", r.header)
	}
}

func TestAPISessionsMakeRetriesExactlyOnce(t *testing.T) {
	p := newPair(t)
	u := p.followURL + "/v1/kv/k?client_id=9&seq=1"
	first := call(t, "PUT", u, "v").want(t, 200).num("revision")
	call(t, "PUT", p.leaderURL+"/v1/kv/other", "x").want(t, 200)
	if again := call(t, "PUT", u, "v").want(t, 200).num("revision"); again != first {
		t.Fatalf("retry revision %d, first %d", again, first)
	}
	if v := call(t, "GET", p.leaderURL+"/v1/kv/k", "").num("version"); v != 1 {
		t.Fatalf("version %d after a retried put", v)
	}
}

func TestAPILeases(t *testing.T) {
	p := newPair(t)
	u := p.followURL + "/v1/leases/leader"
	a := call(t, "POST", u+"/acquire", `{"holder":"a","ttl_ms":5000}`).want(t, 200)
	token := a.num("token")
	if token == 0 || a.num("ttl_ms") != 5000 {
		t.Fatalf("acquire %v", a.body)
	}
	held := call(t, "POST", u+"/acquire", `{"holder":"b","ttl_ms":5000}`).want(t, 409)
	if held.body["code"] != "held" || held.body["holder"] != "a" {
		t.Fatalf("held %v", held.body)
	}
	call(t, "POST", u+"/renew", fmt.Sprintf(`{"holder":"a","token":%d}`, token)).want(t, 200)
	lost := call(t, "POST", u+"/renew", fmt.Sprintf(`{"holder":"a","token":%d}`, token+1)).want(t, 409)
	if lost.body["code"] != "lost" {
		t.Fatalf("lost %v", lost.body)
	}
	g := call(t, "GET", u, "").want(t, 200)
	if g.body["holder"] != "a" || g.num("token") != token || g.body["remaining_ms"] == nil {
		t.Fatalf("get lease %v", g.body)
	}
	if s := call(t, "GET", u+"?stale=true", "").want(t, 200); s.body["remaining_ms"] != nil {
		t.Fatalf("a follower's stale read claims a remaining time: %v", s.body)
	}
	call(t, "POST", u+"/release", fmt.Sprintf(`{"holder":"a","token":%d}`, token)).want(t, 200)
	b := call(t, "POST", u+"/acquire", `{"holder":"b","ttl_ms":5000}`).want(t, 200)
	if b.num("token") <= token {
		t.Fatalf("token did not grow: %d after %d", b.num("token"), token)
	}
}

func TestAPIRejectsBadInput(t *testing.T) {
	p := newPair(t)
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/v1/kv/k?prev_revision=abc", "v"},
		{"PUT", "/v1/kv/k?seq=1", "v"},
		{"PUT", "/v1/kv/k?client_id=1", "v"},
		{"GET", "/v1/kv/k?stale=maybe", ""},
		{"POST", "/v1/leases/L/acquire", `{"holder":"a"}`},
		{"POST", "/v1/leases/L/acquire", `{"ttl_ms":100}`},
		{"POST", "/v1/leases/L/acquire", `not json`},
		{"POST", "/v1/leases/L/acquire", `{"holder":"a","ttl_ms":100,"extra":1}`},
		{"POST", "/v1/leases/L/renew", `{"holder":"a"}`},
		{"POST", "/v1/leases/L/acquire", `{"holder":"a","ttl_ms":999999999999}`},
		{"PUT", "/v1/kv/" + strings.Repeat("k", 2000), "v"},
		{"DELETE", "/v1/members/zero", ""},
	} {
		r := call(t, c.method, p.leaderURL+c.path, c.body)
		if r.code != 400 || r.body["code"] != "invalid" || r.body["error"] == "" {
			t.Errorf("%s %s %q: %d %v, want 400 invalid", c.method, c.path, c.body, r.code, r.body)
		}
	}
}

func TestAPIWatchWaitsForAChange(t *testing.T) {
	p := newPair(t)
	base := p.leaderURL + "/v1/watch/kv/w"
	// Nothing changes: the long poll times out with the current state.
	call(t, "GET", base+"?revision=0&timeout_ms=50", "").want(t, 404)

	got := make(chan reply, 1)
	go func() { got <- call(t, "GET", p.followURL+"/v1/watch/kv/w?revision=0&timeout_ms=20000", "") }()
	// The watch must be waiting before the write, or it would see it at
	// once; both outcomes are correct, so the test only checks the value.
	rev := call(t, "PUT", p.leaderURL+"/v1/kv/w", "new").want(t, 200).num("revision")
	select {
	case r := <-got:
		r.want(t, 200)
		if r.body["value"] != "new" || r.num("revision") != rev {
			t.Fatalf("watch %v", r.body)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("watch did not return after a change")
	}
	// Watching from the current revision waits; a lease watch works alike.
	lw := call(t, "GET", p.leaderURL+"/v1/watch/leases/L?revision=0&timeout_ms=50", "").want(t, 200)
	if lw.body["holder"] != "" {
		t.Fatalf("lease watch %v", lw.body)
	}
}

func TestAPIStatusAndMetrics(t *testing.T) {
	p := newPair(t)
	st := call(t, "GET", p.followURL+"/v1/status", "").want(t, 200)
	if st.num("id") != 2 || st.num("leader") != 1 || st.body["role"] != "follower" {
		t.Fatalf("status %v", st.body)
	}
	call(t, "PUT", p.leaderURL+"/v1/kv/k", "v").want(t, 200)
	resp, err := http.Get(p.leaderURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(raw), `coord_http_requests_total{code="200",route="kv_put"} 1`) {
		t.Fatalf("metrics lack the request count:\n%s", raw)
	}
}

// TestAPIWatchStream follows a key with server-sent events, through a
// follower that relays the leader's stream.
func TestAPIWatchStream(t *testing.T) {
	p := newPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.followURL+"/v1/watch/kv/s?stream=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	events := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- data
			}
		}
		close(events)
	}()
	for i, v := range []string{"one", "two"} {
		rev := call(t, "PUT", p.leaderURL+"/v1/kv/s", v).want(t, 200).num("revision")
		select {
		case data := <-events:
			var kr api.KeyResponse
			if err := json.Unmarshal([]byte(data), &kr); err != nil || kr.Value != v || kr.Revision != rev {
				t.Fatalf("event %d: %s (%v), want %q at %d", i, data, err, v, rev)
			}
		case <-ctx.Done():
			t.Fatalf("no event for write %d", i)
		}
	}
}

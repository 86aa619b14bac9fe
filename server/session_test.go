package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"coord/api"
)

// sessionPair is a leader and a follower API with a short session grace.
type sessionPair struct {
	*pair
	grace time.Duration
}

func newSessionPair(t *testing.T, grace time.Duration) *sessionPair {
	cfg := APIConfig{Metrics: NewMetrics(), SessionKeepAlive: 20 * time.Millisecond, SessionGrace: grace}
	return &sessionPair{pair: newPairOf(t, cfg, APIConfig{}), grace: grace}
}

// acquire takes lease name for holder and returns the token.
func (p *sessionPair) acquire(t *testing.T, name, holder string) uint64 {
	t.Helper()
	body := fmt.Sprintf(`{"holder":%q,"ttl_ms":60000}`, holder)
	return call(t, "POST", p.leaderURL+"/v1/leases/"+name+"/acquire", body).want(t, 200).num("token")
}

// sessionStream is an open session stream, read event by event.
type sessionStream struct {
	resp   *http.Response
	cancel context.CancelFunc
	lines  *bufio.Scanner
}

// openSession opens a session and returns it once its first event came.
func openSession(t *testing.T, base, name, holder string, token uint64) (*sessionStream, api.SessionOpened) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	u := fmt.Sprintf("%s/v1/leases/%s/session?token=%d&holder=%s", base, name, token, holder)
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &sessionStream{resp: resp, cancel: cancel, lines: bufio.NewScanner(resp.Body)}
	t.Cleanup(s.close)
	if resp.StatusCode != 200 {
		t.Fatalf("session %s: status %d", u, resp.StatusCode)
	}
	event, data := s.next(t)
	var opened api.SessionOpened
	if event != api.EventSession || json.Unmarshal([]byte(data), &opened) != nil {
		t.Fatalf("first event %q %q, want %q with a SessionOpened", event, data, api.EventSession)
	}
	return s, opened
}

// next returns the next event's name and data.
func (s *sessionStream) next(t *testing.T) (event, data string) {
	t.Helper()
	for s.lines.Scan() {
		line := s.lines.Text()
		switch {
		case line == "" && event != "":
			return event, data
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
	t.Fatalf("session stream ended: %v", s.lines.Err())
	return "", ""
}

// nextBesidesKeepAlive reads the stream's next event that is not a
// keep-alive: keep-alives come on a timer, and a loaded machine can send
// one before the event a test caused.
func (s *sessionStream) nextBesidesKeepAlive(t *testing.T) (event, data string) {
	t.Helper()
	for {
		if event, data = s.next(t); event != api.EventKeepAlive {
			return event, data
		}
	}
}

// close closes the stream from the holder's side.
func (s *sessionStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// waitLease waits, up to a generous deadline, until cond holds of the
// leader's record of name, waking at each change of it.
func (p *sessionPair) waitLease(t *testing.T, name string, cond func(Lease) bool) Lease {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		changed := p.leader.ChangedOf(Watched{Lease: true, Name: name})
		var l Lease
		p.leader.View(func(v View) { l = v.Lease(name) })
		if cond(l) {
			return l
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("lease %s: condition not met; last %+v", name, l)
		}
	}
}

func TestSessionBadRequests(t *testing.T) {
	p := newSessionPair(t, time.Hour)
	token := p.acquire(t, "s", "alice")
	base := p.leaderURL + "/v1/leases/s/session"
	cases := []struct {
		name, url string
		code      int
		apiCode   api.Code
		says      string
	}{
		{"no token", base + "?holder=alice", 400, api.CodeInvalid, "token is required"},
		{"token 0", base + "?token=0&holder=alice", 400, api.CodeInvalid, "token is required"},
		{"bad token", base + "?token=x&holder=alice", 400, api.CodeInvalid, "unsigned integer"},
		{"no holder", fmt.Sprintf("%s?token=%d", base, token), 400, api.CodeInvalid, "holder is required"},
		{"wrong token", fmt.Sprintf("%s?token=%d&holder=alice", base, token+1), 409, api.CodeLost, "is not current"},
		{"not the holder", fmt.Sprintf("%s?token=%d&holder=bob", base, token), 409, api.CodeLost, `held by "alice", not "bob"`},
		{"lease not held", p.leaderURL + "/v1/leases/free/session?token=1&holder=alice", 409, api.CodeLost, "is not held"},
		{"on a follower", fmt.Sprintf("%s/v1/leases/s/session?token=%d&holder=alice", p.followURL, token), 503, api.CodeUnavailable, "open lease sessions on the leader, node 1"},
	}
	for _, c := range cases {
		r := call(t, "GET", c.url, "")
		if r.code != c.code || r.body["code"] != string(c.apiCode) || !strings.Contains(fmt.Sprint(r.body["error"]), c.says) {
			t.Errorf("%s: %d %v; want %d %s saying %q", c.name, r.code, r.body, c.code, c.apiCode, c.says)
		}
	}
	// Nothing above changed the lease.
	l := p.waitLease(t, "s", func(Lease) bool { return true })
	if l.Holder != "alice" || l.Token != token {
		t.Fatalf("lease after bad requests: %+v", l)
	}
}

// A session closed from the holder's side frees the lease after the grace,
// as a release (not an expiry: the TTL is a minute).
func TestSessionClosedByHolderReleases(t *testing.T) {
	p := newSessionPair(t, 50*time.Millisecond)
	token := p.acquire(t, "s", "alice")
	s, opened := openSession(t, p.leaderURL, "s", "alice", token)
	if opened.Token != token || opened.KeepAliveMs != 20 || opened.GraceMs != 50 {
		t.Fatalf("opened %+v", opened)
	}
	if event, _ := s.next(t); event != api.EventKeepAlive {
		t.Fatalf("second event %q, want a keep-alive", event)
	}
	s.close()
	p.waitLease(t, "s", func(l Lease) bool { return !l.Held() })
	if got := metricValue(t, p.metrics, "coord_lease_session_releases_total"); got != 1 {
		t.Fatalf("session releases %v, want 1", got)
	}
	// The next holder gets a greater token.
	if next := p.acquire(t, "s", "bob"); next <= token {
		t.Fatalf("next token %d, want > %d", next, token)
	}
}

// A tenure with a stream still open keeps its lease when another of its
// streams closes, for as long as that one stays open.
func TestSessionOtherStreamKeepsLease(t *testing.T) {
	p := newSessionPair(t, 100*time.Millisecond)
	token := p.acquire(t, "s", "alice")
	s, _ := openSession(t, p.leaderURL, "s", "alice", token)
	s2, _ := openSession(t, p.leaderURL, "s", "alice", token)
	s.close()
	for range 15 {
		s2.next(t) // keep-alives, 20 ms apart: three graces at least
	}
	var l Lease
	p.leader.View(func(v View) { l = v.Lease("s") })
	if l.Holder != "alice" || l.Token != token {
		t.Fatalf("lease %+v, want still held by alice under %d", l, token)
	}
}

// A stream opened within the grace cancels the pending release.
func TestSessionRegistryReopenCancelsRelease(t *testing.T) {
	var s sessionRegistry
	k := tenureKey{name: "s", token: 7}
	if err := s.open(1, k); err != nil {
		t.Fatal(err)
	}
	s.close(1, k, true, time.Hour, func() { t.Error("released a tenure reopened within the grace") })
	if s.tenures[k].timer == nil {
		t.Fatal("no release pending after the holder's side closed the last stream")
	}
	if err := s.open(1, k); err != nil {
		t.Fatal(err)
	}
	if tn := s.tenures[k]; tn.timer != nil || tn.streams != 1 {
		t.Fatalf("after reopening: %+v, want no release pending and one stream", tn)
	}
}

// The leader ends the stream, and frees nothing, when the tenure ends
// (the holder released) or when it stops leading.
func TestSessionEndedByLeader(t *testing.T) {
	p := newSessionPair(t, 50*time.Millisecond)
	token := p.acquire(t, "s", "alice")
	s, _ := openSession(t, p.leaderURL, "s", "alice", token)
	call(t, "POST", p.leaderURL+"/v1/leases/s/release", fmt.Sprintf(`{"holder":"alice","token":%d}`, token)).want(t, 200)
	if event, data := s.nextBesidesKeepAlive(t); event != api.EventEnd || !strings.Contains(data, api.EndLost) {
		t.Fatalf("after release: %q %q, want end %s", event, data, api.EndLost)
	}

	token = p.acquire(t, "s", "bob")
	s, _ = openSession(t, p.leaderURL, "s", "bob", token)
	p.leader.mu.Lock()
	p.leader.leader = 2
	p.leader.mu.Unlock()
	if event, data := s.nextBesidesKeepAlive(t); event != api.EventEnd || !strings.Contains(data, api.EndNotLeader) {
		t.Fatalf("after losing leadership: %q %q, want end %s", event, data, api.EndNotLeader)
	}
	s.close()
	p.leader.mu.Lock()
	p.leader.leader = 1
	p.leader.mu.Unlock()
	// Three graces with no stream open: a release scheduled for the end
	// of that stream would have freed the lease by then.
	select {
	case <-p.leader.ChangedOf(Watched{Lease: true, Name: "s"}):
		t.Fatal("the lease changed after the leader ended the session")
	case <-time.After(3 * p.grace):
	}
	var l Lease
	p.leader.View(func(v View) { l = v.Lease("s") })
	if l.Holder != "bob" || l.Token != token {
		t.Fatalf("lease %+v, want still held by bob", l)
	}
}

// Once the release is proposed, no stream opens for the tenure again: the
// proposal may commit whatever this node learns of it.
func TestSessionRegistryRefusesReleasingTenure(t *testing.T) {
	var s sessionRegistry
	k := tenureKey{name: "s", token: 7}
	if err := s.open(1, k); err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	s.close(1, k, true, 0, func() { close(released) })
	<-released
	if err := s.open(1, k); err == nil || !strings.Contains(err.Error(), "being released") {
		t.Fatalf("open after release proposed: %v", err)
	}
	// Another term starts from an empty table.
	if err := s.open(2, k); err != nil {
		t.Fatalf("open in a new term: %v", err)
	}
	// A stream closed by the leader's side schedules nothing.
	s.close(2, k, false, 0, func() { t.Error("released a tenure whose stream the leader ended") })
	if err := s.open(2, k); err != nil {
		t.Fatal(err)
	}
}

// A session outlives the server's ReadTimeout: net/http clears the read
// deadline once the request is read (its background read, which cancels
// the request's context when the holder's side closes); were it kept, the
// stream would end at the deadline and free a live holder's lease.
func TestSessionOutlivesReadTimeout(t *testing.T) {
	leader := newFake(1, 1)
	srv := httptest.NewUnstartedServer(NewAPI(leader, APIConfig{SessionKeepAlive: 20 * time.Millisecond, SessionGrace: time.Hour}))
	srv.Config.ReadTimeout = 200 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	token := call(t, "POST", srv.URL+"/v1/leases/s/acquire", `{"holder":"alice","ttl_ms":60000}`).want(t, 200).num("token")
	s, _ := openSession(t, srv.URL, "s", "alice", token)
	for range 50 { // 1 s of keep-alives: five read timeouts
		if event, data := s.next(t); event != api.EventKeepAlive {
			t.Fatalf("event %q %q, want keep-alives only", event, data)
		}
	}
}

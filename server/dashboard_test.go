package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"coord/api"
)

func dashboardOf(t *testing.T, url string) api.Dashboard {
	t.Helper()
	resp, err := http.Get(url + "/v1/dashboard")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("dashboard: %s", resp.Status)
	}
	var d api.Dashboard
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

// A follower's dashboard shows every member as each answered, the
// leases with their tokens, the election, and, once a node is gone, that
// node unreachable.
func TestDashboardOfAFollower(t *testing.T) {
	c := newTestCluster(t, 3)
	res := propose(t, c, Command{Op: OpAcquire, Key: "dash", Holder: "worker-7", TTL: 30 * time.Second})
	leader := c.waitLeader()
	f := c.follower(leader)
	waitApplied(t, f, 10*time.Second, "the lease applied", func(v View) bool { return v.Lease("dash").Token == res.Token })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next := stream(t, ctx, f.httpURL)
	// The first document that shows every member answering with one
	// leader (a loaded machine may be between elections for a moment).
	var d api.Dashboard
	for {
		d = next()
		up, leaders := 0, 0
		for _, n := range d.Nodes {
			if n.Reachable {
				up++
			}
			if n.Role == api.RoleLeader && n.ID == d.Leader {
				leaders++
			}
		}
		if len(d.Nodes) == 3 && up == 3 && leaders == 1 {
			break
		}
	}
	leader = d.Leader
	if d.Node != f.id || d.Scheme != "http" {
		t.Fatalf("dashboard of node %d: node %d, leader %d, scheme %q", f.id, d.Node, leader, d.Scheme)
	}
	for _, n := range d.Nodes {
		if n.HTTP == "" || n.LagEntries == nil {
			t.Errorf("node %d: %+v; want a known address and a lag", n.ID, n)
		}
		// A follower hears from the leader; maybe never from the
		// other follower.
		if (n.ID == f.id && n.LastContactMs != nil) || (n.ID == leader && leader != f.id && n.LastContactMs == nil) {
			t.Errorf("node %d: last contact %v (none for the answering node, some for the leader)", n.ID, n.LastContactMs)
		}
	}
	// Only the leader knows a lease's deadline (renewals are answered
	// there without a Raft write): a follower shows no time left.
	if len(d.Leases) != 1 || d.LeasesHeld != 1 || d.Leases[0].Holder != "worker-7" || d.Leases[0].Token != res.Token ||
		d.Leases[0].RemainingMs != nil {
		t.Errorf("leases %+v, want dash held by worker-7 with token %d and no time left", d.Leases, res.Token)
	}
	// The leader's own dashboard shows the time left, by its clock.
	if ld := stream(t, ctx, c.nodes[leader].httpURL)(); ld.Leader != leader {
		t.Logf("leadership moved from %d to %d under load: the leader's time left not checked", leader, ld.Leader)
	} else if len(ld.Leases) != 1 || ld.Leases[0].RemainingMs == nil || *ld.Leases[0].RemainingMs <= 0 || *ld.Leases[0].RemainingMs > 30000 {
		t.Errorf("the leader's leases %+v, want dash with time left", ld.Leases)
	}
	if len(d.Elections) == 0 || d.Elections[0].Leader != leader {
		t.Errorf("elections %+v, want the one that made %d leader", d.Elections, leader)
	}

	// Another node dies: the follower shows it unreachable, and why.
	var gone uint64
	for id := range c.nodes {
		if id != f.id && id != leader {
			gone = id
		}
	}
	c.crash(gone)
	for {
		d := next()
		i := slices.IndexFunc(d.Nodes, func(n api.DashboardNode) bool { return n.ID == gone })
		if i >= 0 && !d.Nodes[i].Reachable && d.Nodes[i].Error != "" {
			return
		}
	}
}

// stream opens the dashboard's event stream and returns a function that
// reads the next document; it fails the test when the stream ends (ctx's
// deadline).
func stream(t *testing.T, ctx context.Context, url string) func() api.Dashboard {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/dashboard?stream=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := bufio.NewScanner(resp.Body)
	events.Buffer(make([]byte, 1<<20), 1<<20)
	return func() api.Dashboard {
		t.Helper()
		for events.Scan() {
			if data, ok := strings.CutPrefix(events.Text(), "data: "); ok {
				var d api.Dashboard
				if err := json.Unmarshal([]byte(data), &d); err != nil {
					t.Fatalf("event %q: %v", data, err)
				}
				return d
			}
		}
		t.Fatalf("stream ended: %v", events.Err())
		return api.Dashboard{}
	}
}

// The stream sends the dashboard at once, then again after a change.
func TestDashboardStream(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next := stream(t, ctx, c.nodes[leader].httpURL)
	if d := next(); d.Leader != leader || len(d.Nodes) != 3 {
		t.Fatalf("first event: leader %d, %d nodes", d.Leader, len(d.Nodes))
	}
	res := propose(t, c, Command{Op: OpAcquire, Key: "streamed", Holder: "h", TTL: 30 * time.Second})
	for {
		d := next()
		if len(d.Leases) == 1 && d.Leases[0].Token == res.Token {
			return
		}
	}
}

// Pages served by a member may read the dashboard of another member
// (the page fails over); pages of any other origin may not.
func TestDashboardCORSAllowsMembersOnly(t *testing.T) {
	p := newPair(t)
	for _, c := range []struct {
		origin string
		allow  bool
	}{
		{p.leaderURL, true},
		{strings.Replace(p.leaderURL, "127.0.0.1", "localhost", 1), true},
		{"http://evil.example", false},
		{strings.Replace(p.leaderURL, "http://", "https://", 1), false},
		{"http://127.0.0.1:1", false},
	} {
		for _, method := range []string{http.MethodOptions, http.MethodGet} {
			req, _ := http.NewRequest(method, p.followURL+"/v1/dashboard", nil)
			req.Header.Set("Origin", c.origin)
			req.Header.Set("Access-Control-Request-Method", "GET")
			req.Header.Set("Access-Control-Request-Headers", "authorization")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := resp.Header.Get("Access-Control-Allow-Origin")
			if (got == c.origin) != c.allow || (!c.allow && got != "") {
				t.Errorf("%s from %s: Access-Control-Allow-Origin %q, allowed want %v", method, c.origin, got, c.allow)
			}
			if c.allow && method == http.MethodOptions && (resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Headers") != "Authorization") {
				t.Errorf("preflight from %s: %d, headers %v", c.origin, resp.StatusCode, resp.Header)
			}
		}
	}
}

// The page is served from the binary, with a policy that lets it load
// nothing from elsewhere and talk only to the cluster's members.
func TestUIServesThePage(t *testing.T) {
	p := newPair(t)
	for path, want := range map[string]string{"/ui/": "text/html", "/ui/app.js": "javascript", "/ui/style.css": "text/css"} {
		resp, err := http.Get(p.followURL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), want) ||
			!strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self' "+p.leaderURL) ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: %d, %q, CSP %q", path, resp.StatusCode, resp.Header.Get("Content-Type"), csp)
		}
	}
	if code, _ := get(t, p.followURL+"/ui/nothing.js"); code != 404 {
		t.Errorf("GET /ui/nothing.js: %d", code)
	}
}

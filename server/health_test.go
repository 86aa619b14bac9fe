package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"coord/api"
)

// ready is an observation of a follower that passes every check.
func ready(now time.Time) observation {
	return observation{
		status: api.NodeStatus{ID: 2, Role: api.RoleFollower, Term: 3, Leader: 1, Commit: 50, Applied: 50,
			Members: []api.Member{{ID: 1, Voter: true}, {ID: 2, Voter: true}, {ID: 3, Voter: true}}},
		contacts:     map[uint64]time.Time{1: now.Add(-50 * time.Millisecond)},
		leaderCommit: 60,
		contactMax:   time.Second,
	}
}

// Each check of /readyz fails for its own reason, and says it.
func TestReadinessChecks(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, c := range []struct {
		name, check, says string
		change            func(*observation)
	}{
		{"ready", "", "", func(*observation) {}},
		{"leader itself", "", "", func(o *observation) { o.status.Leader, o.status.ID, o.contacts = 2, 2, nil }},
		{"removed", "member", "not in the cluster", func(o *observation) { o.status.Members = o.status.Members[:1] }},
		{"no leader", "leader", "no leader known", func(o *observation) { o.status.Leader = 0 }},
		{"leader never heard", "leader", "never heard from", func(o *observation) { o.contacts = nil }},
		{"leader silent", "leader", "silent for 2s", func(o *observation) { o.contacts[1] = now.Add(-2 * time.Second) }},
		{"disk full", "storage", "storage failing: no space", func(o *observation) { o.status.Storage = &api.StorageStatus{Error: "no space", DiskFull: true} }},
		{"log lost", "storage", "log lost", func(o *observation) { o.status.LogLost = &api.LogLostStatus{Leader: 1, Commit: 50, LastIndex: 20} }},
		{"far behind the leader", "applied", "trails the commit index 5000", func(o *observation) { o.leaderCommit = 5000 }},
		{"applying slowly", "applied", "applied index 3", func(o *observation) { o.status.Applied = 3; o.status.Commit = 2000 }},
		{"a little behind", "", "", func(o *observation) { o.leaderCommit = 50 + ReadyLagEntriesMax }},
	} {
		obs := ready(now)
		c.change(&obs)
		var failed []readyCheck
		for _, r := range readiness(obs, now) {
			if r.failed != "" {
				failed = append(failed, r)
			}
		}
		switch {
		case c.check == "" && len(failed) > 0:
			t.Errorf("%s: failed %+v, want ready", c.name, failed)
		case c.check != "" && (len(failed) != 1 || failed[0].name != c.check || !strings.Contains(failed[0].failed, c.says)):
			t.Errorf("%s: failed %+v, want only %s saying %q", c.name, failed, c.check, c.says)
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The probes answer as Kubernetes' do: "ok", or 503 with a line per
// check; exclude skips one, verbose lists them.
func TestProbesOverHTTP(t *testing.T) {
	p := newPair(t)
	if code, body := get(t, p.followURL+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	if code, body := get(t, p.followURL+"/readyz"); code != 200 || body != "ok\n" {
		t.Fatalf("readyz of a follower with a leader: %d %q", code, body)
	}
	if code, body := get(t, p.followURL+"/readyz?verbose"); code != 200 || !strings.Contains(body, "[+]leader ok\n") || !strings.HasSuffix(body, "readyz check passed\n") {
		t.Fatalf("readyz?verbose: %d %q", code, body)
	}
	p.follower.mu.Lock()
	p.follower.leader = 0
	p.follower.mu.Unlock()
	code, body := get(t, p.followURL+"/readyz")
	if code != 503 || !strings.Contains(body, "[-]leader failed: no leader known\n") || !strings.Contains(body, "[+]member ok\n") ||
		!strings.HasSuffix(body, "readyz check failed\n") {
		t.Fatalf("readyz without a leader: %d %q", code, body)
	}
	if code, body := get(t, p.followURL+"/readyz?exclude=leader"); code != 200 {
		t.Fatalf("readyz?exclude=leader: %d %q", code, body)
	}
	if code, body := get(t, p.followURL+"/healthz"); code != 200 {
		t.Fatalf("healthz without a leader: %d %q (the process is alive)", code, body)
	}
	// pprof is served only when asked for.
	if code, _ := get(t, p.followURL+"/debug/pprof/cmdline"); code != 404 {
		t.Fatalf("pprof without APIConfig.Pprof: %d, want 404", code)
	}
}

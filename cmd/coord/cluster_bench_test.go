package main

import (
	"encoding/json"
	"strings"
	"testing"

	"coord/server/localcluster"
)

func TestClusterBenchBadInput(t *testing.T) {
	for _, tt := range []struct {
		args []string
		has  string
	}{
		{[]string{"cluster", "bench", "--nodes", "0"}, "nodes 0"},
		{[]string{"cluster", "bench", "--duration", "0s"}, "duration 0s"},
		{[]string{"cluster", "bench", "--failovers", "-1"}, "failovers -1"},
		{[]string{"cluster", "bench", "--concurrency", "0"}, "concurrency 0"},
		{[]string{"cluster", "bench", "--concurrency", "2000"}, "concurrency 2000"},
	} {
		code, _, stderr := runCLI(t, tt.args...)
		if code != exitUsage || !strings.Contains(stderr, tt.has) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, exitUsage, tt.has)
		}
	}
}

// The command measures a real cluster of this binary's `server`: writes
// at each concurrency, and a failover; --compare a secure and an insecure
// cluster side by side.
func TestClusterBenchJSON(t *testing.T) {
	code, stdout, stderr := runCLI(t, "cluster", "bench", "--nodes", "3", "--concurrency", "1,2", "--duration", "300ms",
		"--failovers", "1", "--tick", "20ms", "--settle", "1", "--insecure", "--json", "--dir", t.TempDir())
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r localcluster.BenchReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout)
	}
	if r.Nodes != 3 || r.Secure || len(r.Writes) != 2 || len(r.Failovers) != 1 || len(r.FailoverSeconds) != 1 {
		t.Fatalf("report %+v", r)
	}
	for i, w := range r.Writes {
		if w.Concurrency != i+1 || w.Ops == 0 || w.PerSecond <= 0 || w.P99 < w.P50 || w.P50 <= 0 {
			t.Errorf("writes at concurrency %d: %+v", i+1, w)
		}
		// Through the leader: the clients were given the node that led.
		if w.Node == 0 || w.Node != w.Leader {
			t.Errorf("writes through the leader at concurrency %d went through node %d, leader %d", i+1, w.Node, w.Leader)
		}
	}
	if len(r.FollowerWrites) != 2 || len(r.NodeAlone) != 2 {
		t.Fatalf("%d rows through a follower and %d of the node alone, want 2 each", len(r.FollowerWrites), len(r.NodeAlone))
	}
	for i, w := range r.FollowerWrites {
		if w.Concurrency != i+1 || w.Ops == 0 || w.P50 <= 0 || w.Node == 0 || w.Leader == 0 || w.Node == w.Leader {
			t.Errorf("writes through a follower at concurrency %d: %+v", i+1, w)
		}
	}
	for i, a := range r.NodeAlone {
		if a.Concurrency != i+1 || a.Ops == 0 || a.Errors != 0 || a.P50 <= 0 {
			t.Errorf("the node alone at concurrency %d: %+v", i+1, a)
		}
	}
	for _, want := range []string{"through the leader", "through a follower", "the node package alone", "failovers"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q is measured:\n%s", want, stderr)
		}
	}
	if r.FailoverSeconds[0] <= 0 || r.Failovers[0].Terms < 1 {
		t.Errorf("failover %+v, %v s", r.Failovers[0], r.FailoverSeconds[0])
	}

	code, stdout, stderr = runCLI(t, "cluster", "bench", "--compare", "--nodes", "1", "--concurrency", "1", "--duration", "300ms",
		"--tick", "20ms", "--json", "--dir", t.TempDir())
	if code != exitOK {
		t.Fatalf("--compare: exit %d: %s", code, stderr)
	}
	var c localcluster.CompareReport
	if err := json.Unmarshal([]byte(stdout), &c); err != nil {
		t.Fatalf("--compare output is not JSON: %v\n%s", err, stdout)
	}
	if len(c.Compare) != 1 || c.Compare[0].Secure.Ops == 0 || c.Compare[0].Insecure.Ops == 0 || c.Compare[0].Ratio <= 0 {
		t.Fatalf("--compare report %+v", c)
	}
}

package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"coord/server/localcluster"
)

func TestClusterBenchFailoverBadInput(t *testing.T) {
	for _, tt := range []struct {
		args []string
		has  string
	}{
		{[]string{"cluster", "bench", "failover", "--nodes", "2"}, "nodes 2"},
		{[]string{"cluster", "bench", "failover", "--tick", "0s"}, "tick 0s"},
		{[]string{"cluster", "bench", "failover", "--kills", "-1"}, "kills -1"},
		{[]string{"cluster", "bench", "failover", "--faults", "2h"}, "an hour of faults"},
	} {
		code, _, stderr := runCLI(t, tt.args...)
		if code != exitUsage || !strings.Contains(stderr, tt.has) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, exitUsage, tt.has)
		}
	}
}

// One kill and one stop on each cluster, and a short fault run: the
// report has the four series and both fault runs, and the defaults'
// cluster elected in every event.
func TestClusterBenchFailoverJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four clusters of real processes")
	}
	code, stdout, stderr := runCLI(t, "cluster", "bench", "failover", "--kills", "1", "--stops", "1", "--faults", "3s",
		"--tick", "20ms", "--insecure", "--json", "--seed", "3", "--dir", t.TempDir())
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r localcluster.FailoverBenchReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout)
	}
	if r.Nodes != 3 || len(r.Series) != 4 || len(r.Faults) != 2 || r.WriteP50 <= 0 {
		t.Fatalf("report %+v", r)
	}
	for _, s := range r.Series {
		if len(s.Gaps) != 1 || s.Gaps[0] <= 0 || s.Gaps[0] > time.Minute || len(s.Terms) != 1 || s.Terms[0] < 1 {
			t.Errorf("series %+v", s)
		}
	}
	for _, f := range r.Faults {
		if f.Seconds < 3 || f.Cuts+f.Partitions == 0 {
			t.Errorf("fault run %+v", f)
		}
	}
}

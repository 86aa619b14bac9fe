package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSimRunsSeeds(t *testing.T) {
	code, out, stderr := runCLI(t, "sim", "--seeds", "4", "--nodes", "3", "--chaos", "500ms")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(out, "4 seeds passed (1..4), 3 nodes, faults all") {
		t.Errorf("summary missing:\n%s", out)
	}
}

// Each bad value is a usage error that names the flag and the value typed,
// not a field of the simulator's configuration.
func TestSimUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--faults", "meteor"}, "--faults"},
		{[]string{"sim", "--nodes", "0"}, "--nodes 0: want 1 to 9"},
		{[]string{"sim", "--seeds", "0"}, "--seeds 0"},
		{[]string{"sim", "--chaos", "-1s"}, "--chaos -1s"},
		{[]string{"sim", "election-time", "--trials", "0"}, "--trials 0"},
	} {
		code, _, stderr := runCLI(t, tt.args...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, exitUsage, tt.want)
		}
	}
}

func TestSimJSON(t *testing.T) {
	code, out, stderr := runCLI(t, "sim", "--seeds", "2", "--nodes", "3", "--chaos", "500ms", "--json")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var report simReport
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	if report.Seeds != 2 || report.Nodes != 3 || report.Stats.Steps == 0 || report.Stats.Leaders == 0 {
		t.Errorf("report %+v: want 2 seeds of 3 nodes, with steps and leaders", report)
	}
}

func TestSimElectionTimeJSON(t *testing.T) {
	code, out, stderr := runCLI(t, "sim", "election-time", "--trials", "20", "--json")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var report electionReport
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	rows := report.Settings
	if len(rows) != 4 || rows[0].Trials != 20 || rows[0].Failed != 0 || rows[0].P50Ms < 75 {
		t.Errorf("unexpected rows: %+v", rows)
	}
}

func TestSimHelpListsFaults(t *testing.T) {
	code, out, stderr := runCLI(t, "sim", "--help")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(out, "list of loss,delay,reorder,duplicate,partition,crash,membership") {
		t.Errorf("--help does not name the faults:\n%s", out)
	}
}

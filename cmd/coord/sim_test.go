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

func TestSimUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"sim", "--faults", "meteor"},
		{"sim", "--nodes", "0"},
		{"sim", "--seeds", "0"},
		{"sim", "election-time", "--trials", "0"},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, exitUsage, stderr)
		}
	}
}

func TestSimElectionTimeJSON(t *testing.T) {
	code, out, stderr := runCLI(t, "sim", "election-time", "--trials", "20", "--json")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var rows []electionRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("output is not JSON rows: %v\n%s", err, out)
	}
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

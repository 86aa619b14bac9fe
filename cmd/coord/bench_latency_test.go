package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"coord/bench/latency"
)

func TestBenchLatencyBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "latency", "--iterations", "0"},
		{"bench", "latency", "--ttl", "0s"},
		{"bench", "latency", "--store", "nosuch://x"},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != exitUsage || !strings.Contains(stderr, "coord: ") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with a one-line error", args, code, stderr)
		}
	}
}

// The command measures every operation of a real store, and the store's
// plain round trip when it has one.
func TestBenchLatencyJSON(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runCLI(t, "bench", "latency", "--iterations", "5", "--json",
		"--store", "sqlite://"+filepath.Join(dir, "leases.db"))
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var report latencyReport
	if err := json.Unmarshal([]byte(stdout), &report); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, stdout)
	}
	results := report.Results
	ops := map[string]latency.Stats{}
	for _, r := range results {
		ops[r.Op] = r
	}
	for _, op := range latency.Ops {
		r, ok := ops[op]
		if !ok || r.N != 5 || r.Errors != 0 || r.MedianUS <= 0 || r.P99US < r.MedianUS {
			t.Errorf("%s: %+v, want 5 timed samples, median > 0, p99 >= median", op, r)
		}
	}
}

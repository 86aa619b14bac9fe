package main

import (
	"encoding/json"
	"strings"
	"testing"

	"coord/bench/watches"
)

func TestBenchWatchesBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "watches", "--watches", "0"},
		{"bench", "watches", "--nodes", "0"},
		{"bench", "watches", "--max-watches", "-1"},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != exitUsage || !strings.Contains(stderr, "coord: ") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with a one-line error", args, code, stderr)
		}
	}
}

// A real node with --http-max-watches 200 serves 200 of 300 watches at
// once and refuses the others with 503; the figures are the node's memory.
func TestBenchWatchesJSON(t *testing.T) {
	code, stdout, stderr := runCLI(t, "bench", "watches", "--watches", "300", "--nodes", "1",
		"--max-watches", "200", "--after", "10ms", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r watches.Result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout)
	}
	if r.Watches != 300 || r.Waiting != 200 || r.Refused != 100 || r.Failed != 0 {
		t.Fatalf("watches %+v: want 200 waiting and 100 refused of 300", r)
	}
	if r.BeforeBytes <= 0 || r.DuringBytes <= 0 || len(r.After) != 1 || r.After[0].Bytes <= 0 {
		t.Fatalf("memory figures %+v", r)
	}
}

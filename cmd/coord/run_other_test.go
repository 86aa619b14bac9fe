//go:build !linux

package main

import (
	"bytes"
	"strings"
	"testing"
)

// writerCommand and writerMain stand in for the coord run trials' job
// writer (run_trials_test.go), which needs Linux, so that TestMain builds.
const writerCommand = "run-writer"

func writerMain([]string) int { return 2 }

// coordBuild stands in for run_test.go's built binary, which TestMain
// removes.
var coordBuild struct{ dir string }

// TestRunSaysLinuxOnly checks that coord run and its shim fail with a
// message that says why, and run nothing.
func TestRunSaysLinuxOnly(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--store", "redis://127.0.0.1:1/0", "--", "true"},
		{shimCommand, "true"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != exitFailure || !strings.Contains(stderr.String(), "needs Linux") {
			t.Fatalf("coord %v: exit %d, stderr %q; want %d and that it needs Linux", args, code, stderr.String(), exitFailure)
		}
	}
}

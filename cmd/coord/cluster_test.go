package main

import (
	"strings"
	"testing"
)

func TestClusterAndServerRefuseBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		code int
		has  string
	}{
		{[]string{"cluster", "up", "--nodes", "0", "--dir", dir}, exitUsage, "--nodes 0"},
		{[]string{"cluster", "up", "--tick", "0s", "--dir", dir}, exitUsage, "--tick"},
		{[]string{"cluster", "add", "--dir", dir}, exitUsage, "--id is required"},
		{[]string{"cluster", "remove", "--dir", dir}, exitUsage, "--id is required"},
		{[]string{"cluster", "status", "--dir", dir}, exitFailure, "no cluster in"},
		{[]string{"cluster", "down", "--dir", dir}, exitFailure, "no cluster in"},
		{[]string{"server", "--peers", "1=127.0.0.1:1", "--data", dir}, exitUsage, "--id is required"},
		{[]string{"server", "--id", "1", "--peers", "1=nowhere", "--data", dir}, exitUsage, "missing port"},
		{[]string{"server", "--id", "2", "--peers", "1=127.0.0.1:1", "--data", dir}, exitUsage, "no address for --id 2"},
		{[]string{"server", "--id", "1", "--peers", "1=127.0.0.1:1"}, exitUsage, "--data is required"},
	} {
		code, _, stderr := runCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.has) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, tt.code, tt.has)
		}
	}
}

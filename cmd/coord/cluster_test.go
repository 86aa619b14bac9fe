package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coord/server/localcluster"
)

// TestMain lets this test binary stand in for the coord command when a
// test starts it as `server ...` (coord cluster up starts the executable
// it runs in) or as coord run's job shim (coord run re-executes itself).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "server" || os.Args[1] == shimCommand) {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == writerCommand {
		os.Exit(writerMain(os.Args[2:]))
	}
	code := m.Run()
	if coordBuild.dir != "" {
		os.RemoveAll(coordBuild.dir)
	}
	os.Exit(code)
}

// TestClusterLifecycle drives a real local cluster through the CLI: up,
// status, add, remove, down.
func TestClusterLifecycle(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { _, _ = localcluster.Down(dir) })
	must := func(args ...string) string {
		t.Helper()
		code, out, stderr := runCLI(t, args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, stderr)
		}
		return out
	}
	out := must("cluster", "up", "--detach", "--dir", dir, "--tick", "20ms")
	if !strings.Contains(out, "cluster of 3 nodes") || !strings.Contains(out, "coord elect --store raft://") {
		t.Fatalf("up printed:\n%s", out)
	}
	// Followers learn a membership change when the leader's next append
	// reaches them, so status is read until every node agrees (a process
	// outside the cluster has nothing to wait on but its answers).
	statusUntil := func(what string, ok func(string) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			out := must("cluster", "status", "--dir", dir)
			if ok(out) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("status never showed %s:\n%s", what, out)
			}
			time.Sleep(50 * time.Millisecond) // polling another process: nothing to wait on
		}
	}
	statusUntil("a leader and members 1,2,3 on every node", func(out string) bool {
		return strings.Count(out, "leader") >= 1 && strings.Count(out, "1,2,3") == 3
	})
	// status --watch prints a table, then another when one changes.
	tables := startCLI(t, "cluster", "status", "--watch", "--interval", "50ms", "--dir", dir)
	must("cluster", "add", "--id", "4", "--dir", dir)
	must("cluster", "remove", "--id", "2", "--dir", dir)
	statusUntil("members 1,3,4 on every node after add 4 and remove 2", func(out string) bool {
		return strings.Count(out, "1,3,4") == 3
	})
	for deadline := time.After(30 * time.Second); ; {
		var line string
		select {
		case line = <-tables:
		case <-deadline:
			t.Fatal("status --watch never printed node 4 as a member")
		}
		if strings.HasSuffix(line, "1,3,4") {
			break
		}
	}
	out = must("cluster", "down", "--dir", dir)
	if !strings.Contains(out, "stopped 3 nodes") {
		t.Fatalf("down: %s", out)
	}
	if code, _, _ := runCLI(t, "cluster", "status", "--dir", dir); code != exitFailure {
		t.Fatalf("status after down: exit %d, want %d", code, exitFailure)
	}
}

func TestClusterAndServerRefuseBadInput(t *testing.T) {
	dir := t.TempDir()
	// A directory no cluster made: up must neither use nor clear it.
	foreign := t.TempDir()
	notes := filepath.Join(foreign, "notes.txt")
	if err := os.WriteFile(notes, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = localcluster.Down(foreign) })
	for _, tt := range []struct {
		args []string
		code int
		has  string
	}{
		{[]string{"cluster", "up", "--nodes", "0", "--dir", dir}, exitUsage, "--nodes 0"},
		{[]string{"cluster", "up", "--tick", "0s", "--dir", dir}, exitUsage, "--tick"},
		{[]string{"cluster", "up", "--detach", "--dir", foreign}, exitFailure, "which no cluster wrote"},
		{[]string{"cluster", "add", "--dir", dir}, exitUsage, "--id is required"},
		{[]string{"cluster", "remove", "--dir", dir}, exitUsage, "--id is required"},
		{[]string{"cluster", "status", "--dir", dir}, exitFailure, "no cluster in"},
		{[]string{"cluster", "down", "--dir", dir}, exitFailure, "no cluster in"},
		{[]string{"server", "--peers", "1=127.0.0.1:1", "--data", dir}, exitUsage, "--id is required"},
		{[]string{"server", "--id", "1", "--peers", "1=nowhere", "--data", dir}, exitUsage, "missing port"},
		{[]string{"server", "--id", "2", "--peers", "1=127.0.0.1:1", "--data", dir}, exitUsage, "no address for --id 2"},
		{[]string{"server", "--id", "1", "--peers", "1=127.0.0.1:1"}, exitUsage, "--data is required"},
		{[]string{"server", "--id", "1", "--peers", "1=127.0.0.1:1", "--data", dir}, exitUsage, "runs with TLS unless told --insecure"},
		{[]string{"server", "--id", "1", "--peers", "1=127.0.0.1:1", "--data", dir, "--cert-file", "x"}, exitUsage, "--peer-cert-file, --peer-key-file"},
		{[]string{"server", "--id", "1", "--peers", "1=127.0.0.1:1", "--data", dir, "--insecure", "--cert-file", "x"}, exitUsage, "--insecure with --cert-file"},
		{[]string{"server", "--id", "1", "--peers", "1=127.0.0.1:1", "--data", dir, "--insecure", "--client-cert-auth"}, exitUsage, "--insecure with --client-cert-auth"},
		{[]string{"server", "--id", "1", "--peers", "1=127.0.0.1:1", "--data", dir, "--peer-cert-file", "/nonexistent/a", "--peer-key-file", "b",
			"--peer-trusted-ca-file", "c", "--cert-file", "d", "--key-file", "e"}, exitFailure, "peer TLS"},
		{[]string{"cluster", "env", "--dir", dir}, exitFailure, "no cluster in"},
		{[]string{"auth", "token", "create", "--dir", dir}, exitUsage, "--role"},
		{[]string{"auth", "token", "create", "--role", "root", "--dir", dir}, exitUsage, "want read, write or admin"},
		{[]string{"auth", "token", "create", "--role", "read", "--prefix", "a", "--key-prefix", "b", "--dir", dir}, exitUsage, "--prefix sets both"},
		{[]string{"auth", "token", "revoke", "x", "--dir", dir}, exitUsage, "want a positive integer"},
		{[]string{"auth", "token", "list", "--dir", dir}, exitFailure, "no cluster in"},
	} {
		code, _, stderr := runCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.has) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, tt.code, tt.has)
		}
	}
	if _, err := os.Stat(notes); err != nil {
		t.Fatalf("cluster up removed a file it did not write: %v", err)
	}
}

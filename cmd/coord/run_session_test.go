//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// coord run on a raft:// session, SIGKILLed: the job dies with it (PID
// namespace), the cluster frees the lease when the session's grace ends,
// and the next holder is elected long before the 60 s TTL; the job writes
// nothing after that.
func TestRunSessionKilled(t *testing.T) {
	bin := coordBinary(t)
	store := raftStore(t) + "&session=true"
	beat := filepath.Join(t.TempDir(), "beat")
	run := startTrialProc(t, bin, "run", "--store", store, "--name", "job", "--id", "runner", "--ttl", "60s", "--",
		"sh", "-c", `echo started; while :; do echo x >> "$0"; sleep 0.01; done`, beat)
	run.waitStdout(t, "started", time.Minute)
	other := startTrialProc(t, bin, "elect", "--store", store, "--name", "job", "--id", "other", "--ttl", "60s", "--json")
	other.waitStdout(t, `"event":"leader"`, time.Minute)
	run.cmd.Process.Signal(syscall.SIGKILL)
	run.wait(t)
	// Well under the TTL: only the session's end can free the lease.
	other.waitStdout(t, `"event":"elected"`, 30*time.Second)
	before, err := os.ReadFile(beat)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // time for a live job to write ten heartbeats
	after, _ := os.ReadFile(beat)
	if len(after) != len(before) {
		t.Errorf("the job wrote %d heartbeats after the next holder was elected", (len(after)-len(before))/2)
	}
}

// A session frees the lease soon after coord run dies, so the job must die
// with it: --contain subreaper is refused.
func TestRunSessionNeedsPIDNamespace(t *testing.T) {
	code, _, stderr := runCLI(t, "run", "--store", "raft://127.0.0.1:1?session=true&tls=false", "--name", "job",
		"--contain", "subreaper", "--", "true")
	if code != 2 || !strings.Contains(stderr, "--contain pidns") {
		t.Fatalf("exit %d, stderr %q; want 2 naming --contain pidns", code, stderr)
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"coord/bench/failover"
	"coord/lease"
	"coord/lease/leasetest"

	"golang.org/x/sys/unix"
)

// Bad input to elect and run: one error line naming the problem, exit 2,
// and nothing left behind.
func TestLeaseCommandsBadInput(t *testing.T) {
	dir := t.TempDir()
	store := "file://" + filepath.Join(dir, "leader.lock")
	tests := []struct {
		args []string
		says string
	}{
		{[]string{"--store", "bogus:///x"}, `unknown scheme "bogus"`},
		{[]string{"--store", store, "--ttl", "1s", "--renew-deadline", "2s"}, "--ttl 1s is not greater than --renew-deadline 2s"},
		{[]string{"--store", store, "--ttl", "3s", "--renew-interval", "3s"}, "is not greater than --renew-interval 3s"},
		{[]string{"--store", "file://" + filepath.Join(dir, "missing", "leader.lock")}, "no such file or directory"},
		{[]string{"--store", "file:///proc/1/leader.lock"}, "not writable"},
		{[]string{"--store", "file://elsewhere/tmp/leader.lock"}, "this machine only"},
		{[]string{"--ttl", "9s"}, "--store is required"},
	}
	for _, cmd := range []string{"elect", "run"} {
		for _, tt := range tests {
			args := append([]string{cmd}, tt.args...)
			if cmd == "run" {
				args = append(args, "--", "true")
			}
			code, _, stderr := runCLI(t, args...)
			if code != exitUsage {
				t.Errorf("%v: exit %d, want %d; stderr %q", args, code, exitUsage, stderr)
			}
			first, _, _ := strings.Cut(stderr, "\n")
			if !strings.Contains(first, tt.says) {
				t.Errorf("%v: first stderr line %q does not say %q", args, first, tt.says)
			}
		}
	}
	code, _, stderr := runCLI(t, "run", "--store", store, "--", "no-such-command-xyz")
	if code != 127 || !strings.Contains(stderr, "no-such-command-xyz") || strings.Contains(stderr, "--help") {
		t.Errorf("run of a missing command: exit %d, stderr %q; want 127, the name and no usage hint", code, stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("bad input left files behind: %v", entries)
	}
}

// coord run passes CMD's exit status through, gives it the lease in its
// environment, and releases the lease when it is done.
func TestRunPassesStatusAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "env")
	store := "file://" + filepath.Join(dir, "leader.lock")
	code, _, stderr := runCLI(t, "run", "--store", store, "--id", "job", "--ttl", "3s", "--",
		"sh", "-c", `echo "$COORD_FENCING_TOKEN $COORD_LEASE_HOLDER $COORD_LEASE_NAME" > "$0"; exit 3`, out)
	if code != 3 {
		t.Fatalf("exit %d, want CMD's 3; stderr %q", code, stderr)
	}
	env, err := os.ReadFile(out)
	token, rest, _ := strings.Cut(strings.TrimSpace(string(env)), " ")
	if n, perr := strconv.ParseUint(token, 10, 64); err != nil || perr != nil || n == 0 || rest != "job leader.lock" {
		t.Errorf("CMD's environment: %q, %v; want a token, holder job, name leader.lock", env, err)
	}
	b, err := lease.Open(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if rec, err := b.Get(context.Background(), "leader.lock"); err != nil || !rec.Free() {
		t.Errorf("after coord run the lease is %+v, %v; want released", rec, err)
	}
}

// With -n (or the deprecated --wait=false), coord run exits with the
// conflict code at once when the lease is held, naming the holder.
func TestRunNoWait(t *testing.T) {
	dir := t.TempDir()
	store := "file://" + filepath.Join(dir, "leader.lock")
	b, err := lease.Open(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rec, err := b.Acquire(context.Background(), "leader.lock", "someone", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	holds := fmt.Sprintf(`held by "someone" (token %d)`, rec.Token)
	for _, flag := range []string{"-n", "--no-wait", "--wait=false"} {
		code, _, stderr := runCLI(t, "run", "--store", store, flag, "--", "sh", "-c", "echo ran > "+filepath.Join(dir, "ran"))
		if code != exitConflictDefault || !strings.Contains(stderr, holds) {
			t.Errorf("%s: exit %d, stderr %q; want %d and who holds it", flag, code, stderr, exitConflictDefault)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("CMD ran although the lease was held")
	}
}

// When renewals stop working, CMD is dead before the lease can pass to
// anyone else, even if it ignores SIGTERM and the grace period is long.
func TestRunKillsCommandBeforeLeaseCanPass(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "leader.lock")
	open := func() lease.Backend {
		b, err := lease.Open(context.Background(), "file://"+path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	faulty := leasetest.NewFaulty(open())
	other := open()
	beat := filepath.Join(dir, "heartbeat")
	started := filepath.Join(dir, "started")
	if err := syscall.Mkfifo(started, 0o600); err != nil {
		t.Fatal(err)
	}
	// CMD says it started through a FIFO, ignores SIGTERM, and appends a
	// line to the heartbeat file every 10 ms.
	script := `echo started > "$1"; trap "" TERM; while :; do echo x >> "$0"; sleep 0.01; done`
	cfg := lease.Config{Name: "leader.lock", Holder: "job", TTL: 1500 * time.Millisecond,
		RenewDeadline: 500 * time.Millisecond, RenewInterval: 100 * time.Millisecond, RetryPeriod: 50 * time.Millisecond}
	r := &runner{path: "/bin/sh", args: []string{"sh", "-c", script, beat, started}, grace: time.Hour, cfg: cfg,
		lostCode: exitLostDefault, shim: []string{"/proc/self/exe", shimCommand}, log: discardLogger(), stderr: io.Discard}
	done := make(chan error, 1)
	go func() { done <- r.run(context.Background(), faulty) }()

	// Once CMD runs, break the store, and let someone else try to take
	// the lease as soon as it can.
	opened := make(chan error, 1)
	go func() {
		f, err := os.Open(started) // blocks until CMD opens the FIFO
		if err == nil {
			io.Copy(io.Discard, f)
			f.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("CMD never ran")
	}
	deadline := time.Now().Add(30 * time.Second)
	faulty.HangRenewals(true)
	var acquiredAt time.Time
	for time.Now().Before(deadline) {
		if _, err := other.Acquire(context.Background(), "leader.lock", "other", time.Minute); err == nil {
			acquiredAt = time.Now()
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if acquiredAt.IsZero() {
		t.Fatal("the lease never passed to the other contender")
	}
	before, err := os.ReadFile(beat)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !strings.Contains(errString(err), fmt.Sprintf("exit status %d", exitLostDefault)) || !strings.Contains(r.status.Signal.String(), "killed") {
			t.Errorf("coord run returned %v (job %+v), want the lost code %d after a SIGKILL", err, r.status, exitLostDefault)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("coord run did not return")
	}
	after, _ := os.ReadFile(beat)
	if len(after) != len(before) {
		t.Errorf("CMD kept running after the lease passed to another holder: %d more heartbeats", (len(after)-len(before))/2)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestProcessesCLI runs the commands as real processes of the built binary.
func TestProcessesCLI(t *testing.T) {
	bin, err := leasetest.BuildCoord(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Run("ElectReadable", func(t *testing.T) { testElectReadable(t, bin) })
	t.Run("RunSIGTERM", func(t *testing.T) { testRunSIGTERM(t, bin) })
	t.Run("RunKilledTakesCommandAlong", func(t *testing.T) { testRunKilled(t, bin) })
	t.Run("ArticlesEmptyFileWedges", func(t *testing.T) { testArticlesEmptyFile(t, bin) })
	t.Run("ArticlesExclusive", func(t *testing.T) { testArticlesOneShot(t, bin) })
	t.Run("BenchFailover", func(t *testing.T) { testBenchFailover(t, bin) })
}

// startProc starts bin with args and returns it with its stdout lines.
func startProc(t *testing.T, bin string, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("stderr of %v:\n%s", args, stderr.String())
		}
	})
	return cmd, lines
}

// waitLine returns the first line containing want, failing after a minute.
func waitLine(t *testing.T, lines <-chan string, want string) string {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended before a line with %q", want)
			}
			if strings.Contains(l, want) {
				return l
			}
		case <-timeout:
			t.Fatalf("no line with %q within a minute", want)
		}
	}
}

func testElectReadable(t *testing.T, bin string) {
	store := "file://" + filepath.Join(t.TempDir(), "leader.lock")
	a, aOut := startProc(t, bin, "elect", "--store", store, "--id", "a", "--ttl", "3s")
	line := waitLine(t, aOut, "[a] [LEADER] elected, token ")
	_, first, _ := strings.Cut(line, "token ")
	_, bOut := startProc(t, bin, "elect", "--store", store, "--id", "b", "--ttl", "3s")
	waitLine(t, bOut, "[b] [WATCHER] lease held by a, token "+first)
	a.Process.Signal(syscall.SIGTERM)
	waitLine(t, aOut, "[a] [WATCHER] released the lease, token "+first)
	line = waitLine(t, bOut, "[b] [LEADER] elected, token ")
	_, second, _ := strings.Cut(line, "token ")
	if n1, _ := strconv.ParseUint(first, 10, 64); func() bool { n2, _ := strconv.ParseUint(second, 10, 64); return n2 <= n1 }() {
		t.Errorf("b's token %s is not above a's %s", second, first)
	}
	if err := a.Wait(); err != nil {
		t.Errorf("elect after SIGTERM: %v, want exit 0", err)
	}
}

// SIGTERM to coord run stops CMD (SIGTERM), passes its status through and
// releases the lease at once.
func testRunSIGTERM(t *testing.T, bin string) {
	dir := t.TempDir()
	store := "file://" + filepath.Join(dir, "leader.lock")
	run, runOut := startProc(t, bin, "run", "--store", store, "--id", "job", "--", "sh", "-c", `echo started; exec sleep 600`)
	waitLine(t, runOut, "started")
	_, electOut := startProc(t, bin, "elect", "--store", store, "--id", "w", "--json")
	waitLine(t, electOut, `"event":"leader"`)
	run.Process.Signal(syscall.SIGTERM)
	waitLine(t, electOut, `"event":"elected"`)
	err := run.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("coord run after SIGTERM: %v, want exit %d (CMD's status)", err, 128+int(syscall.SIGTERM))
	}
}

// SIGKILL to coord run takes CMD with it (PR_SET_PDEATHSIG).
func testRunKilled(t *testing.T, bin string) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	store := "file://" + filepath.Join(dir, "leader.lock")
	// The pid as this test sees it: /proc is the host's, inside the job's
	// PID namespace too.
	run, runOut := startProc(t, bin, "run", "--store", store, "--", "sh", "-c", `read -r pid rest < /proc/self/stat; echo $pid > "$0"; echo started; exec sleep 600`, pidFile)
	waitLine(t, runOut, "started")
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	defer unix.Close(pidfd)
	run.Process.Kill()
	run.Wait()
	// A pidfd becomes readable when its process exits.
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 30_000)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("CMD (pid %d) outlived coord run by 30s (poll: %d, %v)", pid, n, err)
		}
		return
	}
}

// The articles' lease program, started on a zero-byte lock file, never
// elects anyone: every watcher reports the file unreadable, forever.
func testArticlesEmptyFile(t *testing.T, bin string) {
	path := filepath.Join(t.TempDir(), "leader.lock")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"articles", "lease", path, "--json", "--lease", "1s", "--renew", "50ms", "--watch", "50ms"}
	_, a := startProc(t, bin, args...)
	_, b := startProc(t, bin, args...)
	for _, out := range []<-chan string{a, b} {
		for range 5 { // five watch intervals, and still nobody leads
			line := waitLine(t, out, `"event"`)
			var ev lease.Event
			if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Event != "unreadable" {
				t.Fatalf("event %q (%v), want unreadable", line, err)
			}
		}
	}
	// Without the empty file, one of them leads at once.
	os.Remove(path)
	waitLine(t, mergeLines(a, b), `"event":"elected"`)
}

func mergeLines(chans ...<-chan string) <-chan string {
	out := make(chan string, 1000)
	for _, c := range chans {
		go func() {
			for l := range c {
				out <- l
			}
		}()
	}
	return out
}

func testArticlesOneShot(t *testing.T, bin string) {
	path := filepath.Join(t.TempDir(), "leader.lock")
	at := time.Now().Add(300 * time.Millisecond).Format(time.RFC3339Nano)
	var outs []<-chan string
	for range 4 {
		_, out := startProc(t, bin, "articles", "exclusive", path, "--json", "--at", at)
		outs = append(outs, out)
	}
	elected := 0
	for _, out := range outs {
		if strings.Contains(waitLine(t, out, `"event"`), `"elected"`) {
			elected++
		}
	}
	if elected != 1 {
		t.Errorf("O_EXCL elected %d leaders, want exactly 1", elected)
	}
}

func testBenchFailover(t *testing.T, bin string) {
	out, err := exec.Command(bin, "bench", "failover", "--trials", "3", "--baseline-trials", "2", "--parallel", "2",
		"--contenders", "2", "--ttl", "2s", "--json",
		"--baseline-lease", "1s", "--baseline-renew", "100ms", "--baseline-watch", "100ms").Output()
	if err != nil {
		t.Fatalf("bench failover: %v\n%s", err, out)
	}
	var res struct {
		Results []failover.Stats `json:"results"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("bench output is not JSON: %v\n%s", err, out)
	}
	if len(res.Results) != 4 {
		t.Fatalf("got %d result rows, want 4 (coord and articles, SIGKILL and SIGTERM):\n%s", len(res.Results), out)
	}
	for _, r := range res.Results {
		if r.Trials == 0 || r.MinMS <= 0 || r.MaxMS < r.MedianMS {
			t.Errorf("implausible row %+v", r)
		}
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

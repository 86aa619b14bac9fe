package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"coord/lease"
	"coord/lease/leasetest"

	"github.com/creack/pty"
)

var coordBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// coordBinary builds the coord command once for the tests that run it as a
// real process; the build is removed when the tests end (TestMain).
func coordBinary(t testing.TB) string {
	t.Helper()
	coordBuild.once.Do(func() {
		coordBuild.dir, coordBuild.err = os.MkdirTemp("", "coord-run-test-")
		if coordBuild.err == nil {
			coordBuild.bin, coordBuild.err = leasetest.BuildCoord(coordBuild.dir)
		}
	})
	if coordBuild.err != nil {
		t.Fatal(coordBuild.err)
	}
	return coordBuild.bin
}

// The exit code table: CMD's own status when it ran, the shell's codes
// when it could not, and coord run's documented codes for a lease held
// (-n), a wait that timed out and (TestRunPausedLosesLease) a lease lost.
func TestRunExitCodes(t *testing.T) {
	dir := t.TempDir()
	store := "file://" + filepath.Join(dir, "job.lock")
	held := "file://" + filepath.Join(dir, "held.lock")
	b, err := lease.Open(context.Background(), held)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	heldRec, err := b.Acquire(context.Background(), "held.lock", "someone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("echo never\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sh := func(script string) []string { return []string{"--store", store, "--", "sh", "-c", script} }
	for _, tt := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"exit 0", sh("exit 0"), 0, ""},
		{"exit 1", sh("exit 1"), 1, ""},
		{"exit 2", sh("exit 2"), 2, ""},
		{"exit 3", sh("exit 3"), 3, ""},
		{"exit 7", sh("exit 7"), 7, ""},
		{"killed by SIGKILL", sh("kill -KILL $$"), 137, ""},
		{"killed by SIGTERM", sh("kill -TERM $$"), 143, ""},
		{"not found", []string{"--store", store, "--", "no-such-command-xyz"}, 127, "command not found"},
		{"not executable", []string{"--store", store, "--", plain}, 126, "not executable"},
		{"held, -n", []string{"--store", held, "-n", "--", "true"}, exitConflictDefault, fmt.Sprintf(`held by "someone" (token %d)`, heldRec.Token)},
		{"held, --timeout", []string{"--store", held, "--timeout", "300ms", "--", "true"}, exitConflictDefault, "not acquired within --timeout 300ms"},
		{"held, -n, own code", []string{"--store", held, "-n", "--conflict-exit-code", "9", "--", "true"}, 9, "is held"},
		{"bad exit code flag", []string{"--store", held, "--lost-exit-code", "0", "--", "true"}, exitUsage, "--lost-exit-code 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append([]string{"run"}, tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tt.code, tt.stderr)
			}
		})
	}
}

// Network stores have no default lease name: --name or the URL's fragment.
func TestRunAndElectRequireNameOnNetworkStores(t *testing.T) {
	for _, cmd := range []string{"elect", "run"} {
		args := []string{cmd, "--store", "redis://127.0.0.1:1/0"}
		if cmd == "run" {
			args = append(args, "--", "true")
		}
		code, _, stderr := runCLI(t, args...)
		if code != exitUsage || !strings.Contains(stderr, "--name is required for redis:// stores") {
			t.Errorf("%v: exit %d, stderr %q; want a usage error asking for --name", args, code, stderr)
		}
	}
}

// A coord run that is paused past its lease (SIGSTOP) cannot keep its job
// running into the next holder's lease: the shim kills the job before the
// lease can expire; on SIGCONT coord run reports the lease lost.
func TestRunPausedLosesLease(t *testing.T) {
	bin := coordBinary(t)
	dir := t.TempDir()
	store := "file://" + filepath.Join(dir, "job.lock")
	beat := filepath.Join(dir, "beat")
	run := startTrialProc(t, bin, "run", "--store", store, "--id", "paused", "--ttl", "2s", "--",
		"sh", "-c", `echo started; while :; do echo x >> "$0"; sleep 0.01; done`, beat)
	run.waitStdout(t, "started", time.Minute)
	run.cmd.Process.Signal(syscall.SIGSTOP)
	other := startTrialProc(t, bin, "elect", "--store", store, "--id", "other", "--ttl", "2s", "--json")
	other.waitStdout(t, `"event":"elected"`, time.Minute)
	before, err := os.ReadFile(beat)
	if err != nil {
		t.Fatal(err)
	}
	run.cmd.Process.Signal(syscall.SIGCONT)
	run.wait(t)
	if code := run.cmd.ProcessState.ExitCode(); code != exitLostDefault {
		t.Errorf("coord run exit %d, want the lost code %d; stderr:\n%s", code, exitLostDefault, run.errBuf)
	}
	after, _ := os.ReadFile(beat)
	if len(after) != len(before) {
		t.Errorf("the job wrote %d heartbeats after another holder was elected", (len(after)-len(before))/2)
	}
}

// startPty starts args under a new pseudo-terminal as its session leader and
// returns the process and the terminal's master side, whose output is
// delivered line by line (prompts without a newline as they come).
func startPty(t *testing.T, env []string, args ...string) (*exec.Cmd, *os.File, <-chan string) {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	master, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		master.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	out := make(chan string, 1000)
	go func() {
		defer close(out)
		r := bufio.NewReader(master)
		for {
			s, err := r.ReadString('\n')
			if s != "" {
				out <- s
			}
			if err != nil {
				return
			}
		}
	}()
	return cmd, master, out
}

// expect waits for output containing want.
func expect(t *testing.T, out <-chan string, want string) {
	t.Helper()
	timeout := time.After(time.Minute)
	var seen strings.Builder
	for {
		select {
		case s, ok := <-out:
			if !ok {
				t.Fatalf("terminal closed before %q; output:\n%s", want, seen.String())
			}
			seen.WriteString(s)
			if strings.Contains(seen.String(), want) {
				return
			}
		case <-timeout:
			t.Fatalf("no %q on the terminal within a minute; output:\n%s", want, seen.String())
		}
	}
}

// On a real terminal, CMD reads what the user types, and Ctrl-C reaches it
// as SIGINT: coord run exits 130.
func TestRunTerminalReadAndCtrlC(t *testing.T) {
	bin := coordBinary(t)
	store := "file://" + filepath.Join(t.TempDir(), "job.lock")
	cmd, term, out := startPty(t, nil, bin, "run", "--store", store, "--",
		"sh", "-c", `echo ready; read line; echo "got $line"; echo waiting; exec sleep 600`)
	expect(t, out, "ready")
	io.WriteString(term, "hello\n")
	expect(t, out, "got hello")
	expect(t, out, "waiting")
	io.WriteString(term, "\x03") // Ctrl-C
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("coord run after Ctrl-C: %v (exit %d), want 130", err, code)
	}
}

// Job control under an interactive shell: Ctrl-Z stops coord run with its
// job and the shell gets the terminal back; fg resumes both, and CMD reads
// the terminal again.
func TestRunTerminalCtrlZ(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	bin := coordBinary(t)
	store := "file://" + filepath.Join(t.TempDir(), "job.lock")
	_, term, out := startPty(t, []string{"PS1=$ ", "TERM=dumb"}, bash, "--norc", "--noprofile", "-i")
	// The terminal echoes the command line: re""ady keeps "ready" out of it.
	io.WriteString(term, bin+" run --store "+store+` -- sh -c 'echo re""ady; read line; echo "got-$line"'`+"\n")
	expect(t, out, "ready")
	io.WriteString(term, "\x1a") // Ctrl-Z
	expect(t, out, "Stopped")
	io.WriteString(term, "fg\n")
	io.WriteString(term, "again\n")
	expect(t, out, "got-again")
	io.WriteString(term, "echo status=$?\n")
	expect(t, out, "status=0")
	io.WriteString(term, "exit\n")
}

// coord run --json writes elect's events plus the job's on stderr, in
// order, each a JSON object; stdout stays CMD's.
func TestRunJSONEvents(t *testing.T) {
	store := "file://" + filepath.Join(t.TempDir(), "job.lock")
	code, stdout, stderr := runCLI(t, "run", "--store", store, "--id", "j", "--json", "--", "sh", "-c", "exit 3")
	if code != 3 || stdout != "" {
		t.Fatalf("exit %d, stdout %q; want 3 and nothing", code, stdout)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var ev lease.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("stderr line %q is not an event: %v", line, err)
		}
		if ev.ID != "j" || ev.MonoNS == 0 || ev.Token == 0 {
			t.Errorf("event %+v: want id j, a mono_ns and a token", ev)
		}
		if ev.Event == lease.EventRenewed {
			continue // one may come at any moment on a slow machine
		}
		if ev.Event == "started" && (ev.Detail == "pidns" || ev.Detail == "subreaper") {
			ev.Detail = "CONTAINMENT"
		}
		got = append(got, ev.Event+" "+ev.Detail)
	}
	want := []string{"elected ", "started CONTAINMENT", "exited exit 3", "released "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("events %q, want %q", got, want)
	}
}

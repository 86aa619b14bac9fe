package job_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"coord/internal/job"

	"golang.org/x/sys/unix"
)

// The test binary is its own shim ("job-init") and, for the tests that
// SIGKILL a job's parent, its own parent ("job-parent").
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "job-init":
			os.Exit(job.Init(os.Args[2:]))
		case "job-parent":
			os.Exit(parentMain(os.Args[2:]))
		}
	}
	os.Exit(m.Run())
}

var shim = []string{"/proc/self/exe", "job-init"}

// parentMain starts a job (containment, then the command) and waits for it;
// the test SIGKILLs this process.
func parentMain(args []string) int {
	mode, err := job.ParseContainment(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	path, err := job.LookPath(args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	j, err := job.Start(job.Config{Path: path, Args: args[1:], Shim: shim, Containment: mode,
		Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return j.Wait().Code
}

// modes are the containments this kernel allows, each tested alike.
func modes(t *testing.T) []job.Containment {
	t.Helper()
	out := []job.Containment{job.Subreaper}
	j, err := job.Start(job.Config{Path: "/bin/true", Args: []string{"true"}, Shim: shim, Containment: job.PIDNamespace})
	if err != nil {
		t.Logf("no PID namespace here (%v): testing the subreaper only", err)
		return out
	}
	j.Wait()
	return append(out, job.PIDNamespace)
}

func start(t *testing.T, cfg job.Config) *job.Job {
	t.Helper()
	if cfg.Path == "" {
		path, err := job.LookPath(cfg.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		cfg.Path = path
	}
	cfg.Shim = shim
	j, err := job.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Kill(); j.Wait() })
	return j
}

// The command's exit status passes through, and death by signal N is
// 128+N with the signal named.
func TestExitStatus(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode.String(), func(t *testing.T) {
			for _, tt := range []struct {
				script string
				code   int
				signal syscall.Signal
			}{
				{"exit 0", 0, 0},
				{"exit 3", 3, 0},
				{"exit 255", 255, 0},
				{"kill -TERM $$", 143, syscall.SIGTERM},
				{"kill -KILL $$", 137, syscall.SIGKILL},
			} {
				st := start(t, job.Config{Args: []string{"sh", "-c", tt.script}, Containment: mode}).Wait()
				if st.Code != tt.code || st.Signal != tt.signal || st.Err != nil {
					t.Errorf("%q: status %+v, want code %d signal %v", tt.script, st, tt.code, tt.signal)
				}
			}
		})
	}
}

// A command that cannot be found or executed: LookPath says which, with the
// shell's codes, and so does the shim if the file changes after LookPath.
func TestNotFoundNotExecutable(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		want error
		code int
	}{
		{"no-such-command-xyz", job.ErrNotFound, 127},
		{filepath.Join(dir, "missing"), job.ErrNotFound, 127},
		{plain, job.ErrNotExecutable, 126},
		{dir, job.ErrNotExecutable, 126},
	} {
		_, err := job.LookPath(tt.name)
		if !errors.Is(err, tt.want) || job.ExitCode(err) != tt.code {
			t.Errorf("LookPath(%q) = %v (exit %d), want %v (exit %d)", tt.name, err, job.ExitCode(err), tt.want, tt.code)
		}
	}
	for _, mode := range modes(t) {
		var events []job.Event
		st := start(t, job.Config{Path: filepath.Join(dir, "vanished"), Args: []string{"vanished"}, Containment: mode,
			OnEvent: func(e job.Event) { events = append(events, e) }}).Wait()
		if st.Code != 127 || !errors.Is(st.Err, job.ErrNotFound) {
			t.Errorf("%v: vanished command: %+v, want 127 and ErrNotFound", mode, st)
		}
		st = start(t, job.Config{Path: plain, Args: []string{"plain"}, Containment: mode}).Wait()
		if st.Code != 126 || !errors.Is(st.Err, job.ErrNotExecutable) {
			t.Errorf("%v: plain file: %+v, want 126 and ErrNotExecutable", mode, st)
		}
		if len(events) != 1 || events[0].Kind != job.EventFailed || events[0].Code != 127 {
			t.Errorf("%v: events %+v, want one failed 127", mode, events)
		}
	}
}

// escapee is a script that leaves a grandchild behind that escaped its
// process group and session (double fork and setsid), prints that
// grandchild's pid as the host sees it (/proc is the host's), and waits.
// With close=1 the grandchild also closes every inherited descriptor but
// the output, like a daemon.
const escapee = `
sh -c 'setsid sh -c "
	read -r pid rest < /proc/self/stat
	echo \$pid > \"$0\"
	if [ \"$1\" = 1 ]; then exec 3>&- 4>&- 5>&- 6>&- 7>&-; fi
	exec sleep 600" "$0" "$1" &' "$0" "$1"
while [ ! -s "$0" ]; do sleep 0.01; done
echo ready
exec sleep 600`

// startEscapee starts the escapee under mode and returns the job, the
// grandchild's pid and a pipe end that reads EOF once every process that
// kept the inherited descriptor is gone.
func startEscapee(t *testing.T, mode job.Containment, closeFDs bool) (*job.Job, int, *os.File) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pid")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	arg := "0"
	if closeFDs {
		arg = "1"
	}
	j := start(t, job.Config{Args: []string{"sh", "-c", escapee, pidFile, arg}, Containment: mode,
		Stdout: outW, Stderr: os.Stderr, ExtraFiles: []*os.File{w}})
	w.Close()
	outW.Close()
	t.Cleanup(func() { r.Close(); out.Close() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("escapee said %q, %v", line, err)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(pid, 0); err != nil {
		t.Fatalf("grandchild %d: %v", pid, err)
	}
	return j, pid, r
}

// Kill ends every process of the job, the setsid grandchild too, before
// Wait returns; so does the command's own exit.
func TestKillReachesEscapedGrandchild(t *testing.T) {
	for _, mode := range modes(t) {
		for _, closeFDs := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/close=%v", mode, closeFDs), func(t *testing.T) {
				j, pid, held := startEscapee(t, mode, closeFDs)
				if j.Containment() != mode {
					t.Errorf("containment %v, want %v", j.Containment(), mode)
				}
				j.Kill()
				st := j.Wait()
				if err := unix.Kill(pid, 0); err != unix.ESRCH {
					t.Errorf("grandchild %d still exists after Wait returned (kill 0: %v)", pid, err)
				}
				if !st.Killed || st.Code != 137 {
					t.Errorf("status %+v, want killed, 137", st)
				}
				assertEOF(t, held)
			})
		}
	}
}

// When the command exits on its own, what it left running is killed
// before Wait returns, and the command's status is the job's.
func TestCommandExitEndsJob(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode.String(), func(t *testing.T) {
			j, pid, held := startEscapee(t, mode, false)
			j.Signal(syscall.SIGTERM) // the group: sh and its sleep, not the escaped grandchild
			st := j.Wait()
			if st.Code != 143 || st.Signal != syscall.SIGTERM {
				t.Errorf("status %+v, want the command's SIGTERM", st)
			}
			if err := unix.Kill(pid, 0); err != unix.ESRCH {
				t.Errorf("grandchild %d still exists after Wait returned (kill 0: %v)", pid, err)
			}
			assertEOF(t, held)
		})
	}
}

// A SIGKILL of the job's parent ends the job, the escaped grandchild too.
func TestParentKilledEndsJob(t *testing.T) {
	for _, mode := range modes(t) {
		for _, closeFDs := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/close=%v", mode, closeFDs), func(t *testing.T) {
				pidFile := filepath.Join(t.TempDir(), "pid")
				arg := "0"
				if closeFDs {
					arg = "1"
				}
				parent := exec.Command("/proc/self/exe", "job-parent", mode.String(), "sh", "-c", escapee, pidFile, arg)
				stdout, err := parent.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				parent.Stderr = os.Stderr
				if err := parent.Start(); err != nil {
					t.Fatal(err)
				}
				line, err := bufio.NewReader(stdout).ReadString('\n')
				if err != nil || line != "ready\n" {
					parent.Process.Kill()
					parent.Wait()
					t.Fatalf("escapee said %q, %v", line, err)
				}
				data, _ := os.ReadFile(pidFile)
				pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
				if err != nil {
					t.Fatal(err)
				}
				pidfd, err := unix.PidfdOpen(pid, 0)
				if err != nil {
					t.Fatalf("pidfd_open(%d): %v", pid, err)
				}
				defer unix.Close(pidfd)
				parent.Process.Kill()
				parent.Wait()
				waitExit(t, pidfd, pid)
			})
		}
	}
}

// With a deadline that passes, the shim kills the job by itself: a parent
// that is stopped cannot keep it running.
func TestDeadlineKillsJob(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode.String(), func(t *testing.T) {
			j, pid, held := startEscapee(t, mode, true)
			var events []string
			j.SetDeadline(time.Now().Add(time.Hour))
			j.SetDeadline(time.Now().Add(50 * time.Millisecond)) // the latest deadline counts
			st := j.Wait()
			if !st.Expired || st.Code != 137 {
				t.Errorf("status %+v, want expired, 137 (events %v)", st, events)
			}
			if err := unix.Kill(pid, 0); err != unix.ESRCH {
				t.Errorf("grandchild %d still exists after Wait returned (kill 0: %v)", pid, err)
			}
			assertEOF(t, held)
		})
	}
}

// Bad arguments to the shim: a clear error and exit 125, nothing run.
func TestInitBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"job/v0", "pidns", "0", "/bin/true", "--", "true"},
		{"job/v1", "sideways", "0", "/bin/true", "--", "true"},
		{"job/v1", "auto", "0", "/bin/true", "--", "true"},
		{"job/v1", "subreaper", "-1", "/bin/true", "--", "true"},
		{"job/v1", "subreaper", "0", "/bin/true", "true"},
	} {
		cmd := exec.Command("/proc/self/exe", append([]string{"job-init"}, args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != job.ExitInitFailure || !strings.Contains(string(out), "job shim") {
			t.Errorf("shim %q: %v, %q; want exit %d and an error line", args, err, out, job.ExitInitFailure)
		}
	}
	// Arguments right but not init of a namespace.
	cmd := exec.Command("/proc/self/exe", "job-init", "job/v1", "pidns", "0", "/bin/true", "--", "true")
	cmd.ExtraFiles = []*os.File{os.Stderr, os.Stdin}
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "want pid 1") {
		t.Errorf("shim outside a namespace: %v, %q", err, out)
	}
}

func TestParseContainment(t *testing.T) {
	for _, c := range []job.Containment{job.Auto, job.PIDNamespace, job.Subreaper} {
		if got, err := job.ParseContainment(c.String()); got != c || err != nil {
			t.Errorf("ParseContainment(%q) = %v, %v", c.String(), got, err)
		}
	}
	if _, err := job.ParseContainment("cgroup"); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("ParseContainment(cgroup) = %v, want ErrInvalid", err)
	}
}

// assertEOF checks that every holder of the pipe's write end is gone.
func assertEOF(t *testing.T, r *os.File) {
	t.Helper()
	r.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := io.Copy(io.Discard, r); err != nil {
		t.Errorf("inherited descriptor still held (read %d bytes: %v)", n, err)
	}
}

// waitExit waits up to a minute for the process behind pidfd to exit.
func waitExit(t *testing.T, pidfd, pid int) {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 60_000)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("grandchild %d outlived its job's parent by a minute (poll: %d, %v)", pid, n, err)
		}
		return
	}
}

// Deadlines that queue up while the shim starts are acted on as the latest
// one: a stale deadline read first does not kill a job whose lease was
// renewed since (coord run's trials under heavy load did).
func TestStaleDeadlineDoesNotKill(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode.String(), func(t *testing.T) {
			for i := range 5 {
				j := start(t, job.Config{Args: []string{"sh", "-c", "sleep 0.2"}, Containment: mode})
				j.SetDeadline(time.Now().Add(-time.Second))
				j.SetDeadline(time.Now().Add(time.Hour))
				if st := j.Wait(); st.Expired || st.Code != 0 {
					t.Fatalf("run %d: status %+v, want exit 0: the stale deadline killed the job", i, st)
				}
			}
		})
	}
}

package job

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Descriptors of the shim, set up by Start.
const (
	fdStatus     = 3 // status pipe, write end
	fdControl    = 4 // control pipe, read end
	fdExtraFirst = 5 // Config.ExtraFiles, passed on to CMD as 3, 4, ...
)

// initVersion opens the shim's arguments, so that a coord binary of another
// version (replaced while a job starts) refuses them rather than
// misreading them.
const initVersion = "job/v1"

// ExitInitFailure is the shim's exit code when it cannot do its work (bad
// arguments, not init of its namespace), as timeout(1) and docker use 125.
const ExitInitFailure = 125

// extraFilesMax bounds Config.ExtraFiles.
const extraFilesMax = 64

// initArgs returns the arguments Start passes to the shim after Config.Shim.
func initArgs(mode Containment, extra int, path string, args []string) []string {
	return append([]string{initVersion, mode.String(), strconv.Itoa(extra), path, "--"}, args...)
}

// initSpec is what the shim was asked to do.
type initSpec struct {
	mode  Containment
	extra int
	path  string
	args  []string
}

func parseInitArgs(a []string) (initSpec, error) {
	if len(a) < 6 || a[0] != initVersion || a[4] != "--" {
		return initSpec{}, fmt.Errorf("%w: want %s MODE EXTRA PATH -- ARGV0 [ARG...], got %q", ErrInvalid, initVersion, a)
	}
	mode, err := ParseContainment(a[1])
	if err != nil || mode == Auto {
		return initSpec{}, fmt.Errorf("%w: mode %q", ErrInvalid, a[1])
	}
	extra, err := strconv.Atoi(a[2])
	if err != nil || extra < 0 || extra > extraFilesMax {
		return initSpec{}, fmt.Errorf("%w: extra files %q", ErrInvalid, a[2])
	}
	return initSpec{mode: mode, extra: extra, path: a[3], args: a[5:]}, nil
}

// Init is the shim: the body of the hidden command that Config.Shim names,
// called with the arguments after it. It runs as the job's first process:
// init of the job's PID namespace, or a child subreaper. It starts the
// command, reaps every process of the job, reports the command's events to
// its parent, and returns (for the caller to exit with) the command's exit
// code once every other process of the job is dead too.
//
// Signals that reach the shim (the job's process group gets them all) are
// not acted on: the command got them as well.
func Init(args []string) int {
	spec, err := parseInitArgs(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "coord: job shim: %v\n", err)
		return ExitInitFailure
	}
	status := os.NewFile(fdStatus, "job-status")
	control := os.NewFile(fdControl, "job-control")
	if status == nil || control == nil {
		fmt.Fprintln(os.Stderr, "coord: job shim: descriptors 3 and 4 are not open")
		return ExitInitFailure
	}
	files := []uintptr{0, 1, 2}
	for fd := fdStatus; fd < fdExtraFirst+spec.extra; fd++ {
		unix.CloseOnExec(fd)
		if fd >= fdExtraFirst {
			files = append(files, uintptr(fd))
		}
	}
	s := &shim{spec: spec, status: status}
	if err := s.contain(); err != nil {
		fmt.Fprintf(os.Stderr, "coord: job shim: %v\n", err)
		return ExitInitFailure
	}
	return s.run(control, files)
}

// shim is the state of the job's first process.
type shim struct {
	spec   initSpec
	status *os.File
	pid    int // the command's pid
}

// contain checks or sets up the containment.
func (s *shim) contain() error {
	if s.spec.mode == Subreaper {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("become a subreaper: %w", err)
		}
		return nil
	}
	if pid := os.Getpid(); pid != 1 {
		return fmt.Errorf("want pid 1 in a new PID namespace, have pid %d", pid)
	}
	return nil
}

func (s *shim) report(m message) {
	writeMessage(s.status, m) // a parent that is gone gets nothing; the job dies anyway
}

// run starts the command and serves until the job ends.
func (s *shim) run(control *os.File, files []uintptr) int {
	sigs := make(chan os.Signal, 64)
	// SIGCHLD to reap; the others so that the Go runtime neither exits
	// nor stops on them (signal.Notify installs handlers, which exec resets
	// to the default in the command, unlike an ignored disposition).
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)
	pid, err := syscall.ForkExec(s.spec.path, s.spec.args, &syscall.ProcAttr{Env: os.Environ(), Files: files})
	if err != nil {
		code := ExitNotExecutable
		if errors.Is(err, syscall.ENOENT) {
			code = ExitNotFound
		}
		s.report(message{kind: msgFailed, number: int64(code), text: fmt.Sprintf("%s: %v", filepath.Base(s.spec.path), err)})
		fmt.Fprintf(os.Stderr, "coord: %s: %v\n", s.spec.path, err)
		return code
	}
	s.pid = pid
	s.report(message{kind: msgStarted})
	deadlines := make(chan int64, 1)
	go readControl(control, deadlines)
	var expiry <-chan time.Time
	var timer *time.Timer
	for {
		select {
		case sig := <-sigs:
			if sig != syscall.SIGCHLD {
				continue
			}
			if code, done := s.reap(); done {
				s.killAll()
				return code
			}
		case mono, ok := <-deadlines:
			if !ok {
				// The parent is gone, or asks for the end: nothing may
				// outlive it.
				s.killAll()
				return 128 + int(syscall.SIGKILL)
			}
			if timer != nil {
				timer.Stop()
			}
			timer = time.NewTimer(time.Duration(mono - monotonicNow()))
			expiry = timer.C
		case <-expiry:
			// Deadlines queue up while the shim starts or is slow: the
			// one that fired may be stale. Act only on the latest.
			latest, open := latestDeadline(control, deadlines)
			if !open {
				s.killAll()
				return 128 + int(syscall.SIGKILL)
			}
			if latest != 0 && latest > monotonicNow() {
				timer = time.NewTimer(time.Duration(latest - monotonicNow()))
				expiry = timer.C
				continue
			}
			s.report(message{kind: msgExpired})
			s.killAll()
			return 128 + int(syscall.SIGKILL)
		}
	}
}

// latestDeadline returns the latest deadline sent but not yet acted on (0
// if none), once the control pipe holds no unread bytes, and false if the
// parent is gone.
func latestDeadline(control *os.File, deadlines chan int64) (int64, bool) {
	var latest int64
	for range 1000 {
		select {
		case mono, ok := <-deadlines:
			if !ok {
				return latest, false
			}
			latest = max(latest, mono)
			continue
		default:
		}
		n, err := unix.IoctlGetInt(int(control.Fd()), unix.TIOCINQ) // FIONREAD: unread bytes in the pipe
		if err != nil || n == 0 {
			// Give readControl a moment to hand over a line it read (10
			// ms of the 250 ms coord run leaves between this deadline and
			// the lease's expiry).
			time.Sleep(10 * time.Millisecond)
			select {
			case mono, ok := <-deadlines:
				if !ok {
					return latest, false
				}
				latest = max(latest, mono)
				continue
			default:
			}
			return latest, true
		}
		time.Sleep(time.Millisecond) // readControl is reading them
	}
	return latest, true
}

// readControl sends each deadline read from control, and closes deadlines
// at end of file or on a bad line (a broken parent is a gone parent).
func readControl(control *os.File, deadlines chan int64) {
	defer close(deadlines)
	err := readMessages(control, func(m message) {
		if m.kind != msgDeadline {
			return
		}
		select {
		case <-deadlines: // keep only the latest
		default:
		}
		deadlines <- m.number
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "coord: job shim: %v\n", err)
	}
}

// reap collects every child that changed state and reports the command's
// changes. It returns the command's exit code and true once it has ended.
func (s *shim) reap() (int, bool) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG|unix.WUNTRACED|unix.WCONTINUED, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return 0, false
		}
		if pid != s.pid {
			continue // an orphan of the job, now reaped
		}
		switch {
		case ws.Stopped():
			s.report(message{kind: msgStopped, number: int64(ws.StopSignal())})
		case ws.Continued():
			s.report(message{kind: msgContinued})
		case ws.Exited():
			s.report(message{kind: msgExited, number: int64(ws.ExitStatus())})
			return ws.ExitStatus(), true
		case ws.Signaled():
			s.report(message{kind: msgSignaled, number: int64(ws.Signal())})
			return 128 + int(ws.Signal()), true
		}
	}
}

// killAll kills every remaining process of the job and reaps them all, so
// that the shim exits last. As init, kill(-1) reaches every process of the
// namespace; as a subreaper, every orphan of the job becomes a child of
// the shim, so killing children until none is left reaches them all.
func (s *shim) killAll() {
	for {
		killed := 0
		if s.spec.mode == PIDNamespace {
			if unix.Kill(-1, unix.SIGKILL) == nil {
				killed++
			}
		} else {
			for _, pid := range children() {
				if unix.Kill(pid, unix.SIGKILL) == nil {
					killed++
				}
			}
		}
		flags := 0
		if killed == 0 {
			// Nothing to kill was found, but a child may be on its way
			// (an orphan being handed over): look, and look again.
			flags = unix.WNOHANG
		}
		pid, err := unix.Wait4(-1, nil, flags, nil)
		switch {
		case err == unix.ECHILD:
			return
		case pid == 0:
			time.Sleep(time.Millisecond)
		}
	}
}

// children lists the shim's children from /proc: every thread's list, as
// a child belongs to the thread that forked it (orphans to some thread).
func children() []int {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	var pids []int
	for _, path := range tasks {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(field); err == nil && pid > 0 {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

package job

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Containment says how a job's processes are kept together.
type Containment int

// The containment mechanisms, strongest first.
const (
	// Auto uses a PID namespace where the kernel allows one and falls back
	// to a subreaper otherwise, saying so in one log line.
	Auto Containment = iota
	// PIDNamespace runs the shim as init of a new PID namespace (inside a
	// new user namespace when not root): when it dies, however it dies, the
	// kernel kills every process of the job, and it dies with its parent
	// (PR_SET_PDEATHSIG).
	PIDNamespace
	// Subreaper makes the shim a child subreaper (PR_SET_CHILD_SUBREAPER):
	// every process the job starts stays its descendant, and it kills them
	// all before it exits, including when its parent dies. A SIGKILL of the
	// shim itself lets them escape.
	Subreaper
)

// String names the mechanism as the command line and the logs do.
func (c Containment) String() string {
	switch c {
	case Auto:
		return "auto"
	case PIDNamespace:
		return "pidns"
	case Subreaper:
		return "subreaper"
	}
	return "containment(" + strconv.Itoa(int(c)) + ")"
}

// ParseContainment parses a name printed by String.
func ParseContainment(s string) (Containment, error) {
	for _, c := range []Containment{Auto, PIDNamespace, Subreaper} {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("%w: containment %q: want auto, pidns or subreaper", ErrInvalid, s)
}

// Errors of Start and LookPath.
var (
	// ErrInvalid means the Config is unusable.
	ErrInvalid = errors.New("job: invalid config")
	// ErrNotFound means the command does not exist (exit code 127).
	ErrNotFound = errors.New("job: command not found")
	// ErrNotExecutable means the command exists but cannot be executed
	// (exit code 126).
	ErrNotExecutable = errors.New("job: command not executable")
)

// Exit codes for a command that could not be executed, the shell's
// convention.
const (
	ExitNotExecutable = 126
	ExitNotFound      = 127
)

// LookPath resolves a command name as the shell would, and classifies a
// failure: an error wrapping ErrNotFound or ErrNotExecutable.
func LookPath(file string) (string, error) {
	path, err := exec.LookPath(file)
	switch {
	case err == nil:
		return path, nil
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%w: %s", ErrNotFound, file)
	default:
		return "", fmt.Errorf("%w: %s: %v", ErrNotExecutable, file, err)
	}
}

// ExitCode returns the shell's exit code for an error of LookPath or Start:
// 127 for ErrNotFound, 126 for ErrNotExecutable, else 0.
func ExitCode(err error) int {
	switch {
	case errors.Is(err, ErrNotFound):
		return ExitNotFound
	case errors.Is(err, ErrNotExecutable):
		return ExitNotExecutable
	}
	return 0
}

// Config describes a job.
type Config struct {
	// Path is the command to execute (see LookPath); Args its argument
	// list, Args[0] included.
	Path string
	Args []string
	// Env is the command's environment; nil means this process's.
	Env []string
	// Stdin, Stdout and Stderr are the command's standard files; nil means
	// /dev/null.
	Stdin, Stdout, Stderr *os.File
	// ExtraFiles are inherited by the command as descriptors 3, 4, ..., and
	// by whatever it starts that keeps them open. The shim keeps them open
	// until every process of the job is gone.
	ExtraFiles []*os.File
	// Shim is the command line of a program that calls Init with the
	// arguments Start appends to it, such as {"/proc/self/exe", "job-init"}.
	Shim []string
	// Containment chooses the mechanism; Auto (the zero value) picks the
	// strongest the kernel allows.
	Containment Containment
	// Terminal, if set, is this process's controlling terminal: the job's
	// process group is its foreground group while the job runs (if this
	// process was in the foreground), and job control works: when the job
	// stops (Ctrl-Z, or a background read), this process takes the
	// terminal back and stops itself with the same signal, and when it is
	// continued it hands the terminal back (if in the foreground again) and
	// continues the job.
	Terminal *os.File
	// OnEvent, if set, is called with every event of the job, in order, on
	// one goroutine. It must not block for long.
	OnEvent func(Event)
	// Logger gets the one line that says a weaker containment is used;
	// nil means slog.Default().
	Logger *slog.Logger
}

// Event is something that happened to the job's command.
type Event struct {
	// Kind is one of started, failed, stopped, continued, exited,
	// signaled, expired.
	Kind string
	// Signal is the signal of stopped and signaled.
	Signal syscall.Signal
	// Code is the exit status of exited and the exit code of failed.
	Code int
	// Detail says why, for failed; for started, the containment in use.
	Detail string
}

// Event kinds.
const (
	EventStarted   = msgStarted
	EventFailed    = msgFailed
	EventStopped   = msgStopped
	EventContinued = msgContinued
	EventExited    = msgExited
	EventSignaled  = msgSignaled
	EventExpired   = msgExpired
)

// Status is how a job ended.
type Status struct {
	// Code is the exit code as a shell reports it: the command's exit
	// status, 128+N if signal N killed it, 126 or 127 if it could not be
	// executed.
	Code int
	// Signal is the signal that killed the command, 0 if it exited.
	Signal syscall.Signal
	// Err is set when the command could not be executed (it wraps
	// ErrNotFound or ErrNotExecutable) or the shim failed.
	Err error
	// Expired reports that the shim killed the job at its deadline.
	Expired bool
	// Killed reports that Kill ended the job.
	Killed bool
}

// Job is a running command and everything it starts. Its methods are safe
// for concurrent use.
type Job struct {
	cfg     Config
	mode    Containment
	log     *slog.Logger
	shim    *exec.Cmd
	pid     int // the shim's pid, which is the job's process group id
	term    *terminal
	control *os.File // write end; closing it ends the job

	mu       sync.Mutex
	status   Status
	reported bool // the shim reported how CMD ended
	killed   bool
	stopped  bool // CMD is stopped (job control)
	closed   bool // control closed
	shimErr  error

	exited chan struct{} // closed when the shim has been waited for
	done   chan struct{} // closed when exited and the status is settled
}

// Start starts the shim, which starts the command. It returns once the
// shim runs; the command's start (or failure to start) is reported by an
// event and, for a failure, by Wait's Status.
func Start(cfg Config) (*Job, error) {
	if cfg.Path == "" || len(cfg.Args) == 0 || len(cfg.Shim) == 0 {
		return nil, fmt.Errorf("%w: Path, Args and Shim are required", ErrInvalid)
	}
	if cfg.Containment < Auto || cfg.Containment > Subreaper {
		return nil, fmt.Errorf("%w: containment %d", ErrInvalid, cfg.Containment)
	}
	j := &Job{cfg: cfg, log: cfg.Logger, exited: make(chan struct{}), done: make(chan struct{})}
	if j.log == nil {
		j.log = slog.Default()
	}
	if cfg.Terminal != nil {
		j.term = newTerminal(cfg.Terminal)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("job: status pipe: %w", err)
	}
	controlR, controlW, err := os.Pipe()
	if err != nil {
		statusR.Close()
		statusW.Close()
		return nil, fmt.Errorf("job: control pipe: %w", err)
	}
	j.control = controlW
	started := make(chan error, 1)
	// The shim is started, waited for and released by one goroutine locked
	// to its OS thread: PR_SET_PDEATHSIG fires when the thread that forked
	// the shim exits (go.dev/issue/27505), so that thread must outlive it.
	go j.supervise(statusW, controlR, started)
	err = <-started
	statusW.Close()
	controlR.Close()
	if err != nil {
		statusR.Close()
		controlW.Close()
		return nil, err
	}
	go j.readStatus(statusR)
	return j, nil
}

// supervise starts the shim, reports the outcome on started, and waits for
// it on the same locked thread.
func (j *Job) supervise(statusW, controlR *os.File, started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	modes := []Containment{j.cfg.Containment}
	if j.cfg.Containment == Auto {
		modes = []Containment{PIDNamespace, Subreaper}
	}
	var firstErr error
	for _, mode := range modes {
		cmd := j.shimCommand(mode, statusW, controlR)
		err := cmd.Start()
		if err == nil {
			if firstErr != nil {
				j.log.Warn("job: no PID namespace here, so the job is contained by a subreaper: "+
					"its processes die with coord run unless the shim itself is SIGKILLed", "err", firstErr)
			}
			j.shim, j.mode, j.pid = cmd, mode, cmd.Process.Pid
			started <- nil
			j.wait()
			return
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	started <- fmt.Errorf("job: start shim %s: %w", j.cfg.Shim[0], firstErr)
}

// shimCommand returns the command that starts the shim in mode.
func (j *Job) shimCommand(mode Containment, statusW, controlR *os.File) *exec.Cmd {
	args := append(append([]string{}, j.cfg.Shim[1:]...), initArgs(mode, len(j.cfg.ExtraFiles), j.cfg.Path, j.cfg.Args)...)
	cmd := exec.Command(j.cfg.Shim[0], args...)
	cmd.Env = j.cfg.Env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = j.cfg.Stdin, j.cfg.Stdout, j.cfg.Stderr
	cmd.ExtraFiles = append([]*os.File{statusW, controlR}, j.cfg.ExtraFiles...)
	// The job's own process group, so that signals reach all of it and
	// the terminal can make it the foreground group.
	attr := &syscall.SysProcAttr{Setpgid: true}
	if mode == PIDNamespace {
		attr.Cloneflags = syscall.CLONE_NEWPID
		attr.Pdeathsig = syscall.SIGKILL
		if uid := os.Geteuid(); uid != 0 {
			// Unprivileged: a user namespace owns the PID namespace. The
			// job keeps its own uid and gid (mapped to themselves).
			attr.Cloneflags |= syscall.CLONE_NEWUSER
			attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
			gid := os.Getegid()
			attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		}
	}
	if j.term != nil && j.term.isForeground() {
		attr.Foreground = true
		attr.Ctty = j.term.fd
	}
	cmd.SysProcAttr = attr
	return cmd
}

// wait waits for the shim, which exits only after every process of the job
// is gone: as init of a PID namespace, the kernel does not report its death
// before the namespace is empty; as a subreaper, it reaps them all first.
func (j *Job) wait() {
	err := j.shim.Wait()
	j.mu.Lock()
	j.shimErr = err
	j.closeControlLocked()
	j.mu.Unlock()
	if j.term != nil {
		j.term.takeBack(j.pid)
		j.term.stop()
	}
	close(j.exited)
}

// readStatus reads the shim's status lines until it exits (the pipe's only
// writer is the shim), then settles the status once the shim has been
// waited for, and marks the job done.
func (j *Job) readStatus(r *os.File) {
	defer r.Close()
	if err := readMessages(r, j.handle); err != nil {
		j.log.Error("job: bad status from the shim", "err", err)
		io.Copy(io.Discard, r) // until the shim exits
	}
	<-j.exited
	j.mu.Lock()
	if !j.reported {
		// The shim died without reporting: it was killed (Kill, or the
		// kernel), and the command with it.
		j.status = Status{Code: 128 + int(syscall.SIGKILL), Signal: syscall.SIGKILL, Killed: j.killed}
		if !j.killed {
			j.status.Err = fmt.Errorf("job: the shim ended without reporting (%v)", j.shimErr)
		}
	}
	j.mu.Unlock()
	close(j.done)
}

// handle applies one status message.
func (j *Job) handle(m message) {
	ev := Event{Kind: m.kind}
	j.mu.Lock()
	switch m.kind {
	case msgStarted:
		ev.Detail = j.mode.String()
	case msgFailed:
		ev.Code, ev.Detail = int(m.number), m.text
		sentinel := ErrNotExecutable
		if m.number == ExitNotFound {
			sentinel = ErrNotFound
		}
		j.status, j.reported = Status{Code: ev.Code, Err: fmt.Errorf("%w: %s", sentinel, m.text)}, true
	case msgExited:
		ev.Code = int(m.number)
		j.status, j.reported = Status{Code: ev.Code}, true
	case msgSignaled:
		ev.Signal = syscall.Signal(m.number)
		j.status, j.reported = Status{Code: 128 + int(m.number), Signal: ev.Signal}, true
	case msgExpired:
		j.status, j.reported = Status{Code: 128 + int(syscall.SIGKILL), Signal: syscall.SIGKILL, Expired: true}, true
	case msgStopped:
		ev.Signal = syscall.Signal(m.number)
		j.stopped = true
	case msgContinued:
		j.stopped = false
	}
	j.mu.Unlock()
	if cb := j.cfg.OnEvent; cb != nil {
		cb(ev)
	}
	if m.kind == msgStopped && j.term != nil {
		j.term.jobStopped(j.pid, ev.Signal)
	}
}

// Containment returns the mechanism in use.
func (j *Job) Containment() Containment { return j.mode }

// Pgid returns the job's process group id (the shim's pid in this
// process's PID namespace).
func (j *Job) Pgid() int { return j.pid }

// Signal sends sig to the job's process group: the command and whatever it
// started without a group of its own, as a terminal does.
func (j *Job) Signal(sig syscall.Signal) error {
	select {
	case <-j.exited:
		return nil // the group is gone; its id may be reused
	default:
	}
	if err := unix.Kill(-j.pid, sig); err != nil && err != unix.ESRCH {
		return fmt.Errorf("job: signal %s: %w", signalName(sig), err)
	}
	return nil
}

// Kill ends every process of the job at once (SIGKILL). Wait returns when
// they are all gone.
func (j *Job) Kill() {
	j.mu.Lock()
	j.killed = true
	if j.mode == PIDNamespace && !j.closed {
		// The kernel kills the whole namespace with its init, even a shim
		// that is stopped.
		unix.Kill(j.pid, unix.SIGKILL)
	}
	j.closeControlLocked() // a subreaper shim kills everything on EOF
	j.mu.Unlock()
}

// SetDeadline tells the shim to kill the job at t unless a later deadline
// comes first: a backstop for a parent that is stopped or hung and cannot
// stop the job itself. t is read on this process's clock and passed as
// CLOCK_MONOTONIC, which the shim shares.
func (j *Job) SetDeadline(t time.Time) {
	mono := monotonicNow() + int64(time.Until(t))
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	if err := writeMessage(j.control, message{kind: msgDeadline, number: max(mono, 0)}); err != nil {
		j.log.Debug("job: send deadline", "err", err)
	}
}

func (j *Job) closeControlLocked() {
	if !j.closed {
		j.closed = true
		j.control.Close()
	}
}

// Done is closed when every process of the job is gone.
func (j *Job) Done() <-chan struct{} { return j.done }

// Wait waits until every process of the job is gone and returns how the
// command ended.
func (j *Job) Wait() Status {
	<-j.done
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.status
}

// monotonicNow returns CLOCK_MONOTONIC in nanoseconds.
func monotonicNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

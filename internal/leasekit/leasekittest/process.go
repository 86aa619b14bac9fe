package leasekittest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"coord/internal/freeport"
)

// FreePort returns a loopback TCP port that nobody listened on a moment
// ago, for a server the test starts itself. It lies below the ephemeral
// range (see internal/freeport), so that no client's connection takes it
// while the server is down between a Kill and a Restart.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// LookPath returns the path of the server command file (as exec.LookPath).
// When it is missing the test is skipped or fails as ServerURL(t, env)
// does, and fails anyway if env is set: a test that was given a server must
// not pass in silence without its own.
func LookPath(t testing.TB, env, file string) string {
	t.Helper()
	path, err := exec.LookPath(file)
	if err != nil {
		ServerURL(t, env)
		t.Fatalf("%s is not installed, though %s is set: %v", file, env, err)
	}
	return path
}

// ServerOptions say how StartServer runs a server process and when it is
// up.
type ServerOptions struct {
	// Port is the loopback port the server listens on (see FreePort). The
	// server is up once 127.0.0.1:Port accepts connections and Ready, if
	// set, succeeds.
	Port int
	// Ready, if set, is a further check that the server answers (see
	// Opens), for servers that accept connections before they serve. Each
	// call gets a context of probeTimeout.
	Ready func(context.Context) error
	// StartTimeout bounds the wait for the server to be up. Default 60s.
	StartTimeout time.Duration
	// StopSignal is what Kill sends. Default SIGKILL; PostgreSQL wants
	// SIGQUIT, its immediate shutdown (a postmaster killed outright leaves
	// its backends behind, holding the shared memory a restart needs).
	StopSignal syscall.Signal
	// Credential, if set, runs the process as another user (PostgreSQL
	// refuses to run as root).
	Credential *syscall.Credential
}

const (
	// startTimeoutDefault is ServerOptions.StartTimeout's default: a server
	// may recover a crashed data directory first.
	startTimeoutDefault = 60 * time.Second
	// probeTimeout bounds each check that the server is up.
	probeTimeout = time.Second
	// pollInterval spaces those checks.
	pollInterval = 50 * time.Millisecond
	// killTimeout bounds the wait for a process to exit after StopSignal,
	// before it gets SIGKILL.
	killTimeout = 30 * time.Second
	// outputMax is how much of the server's output (the end) is kept for
	// failure messages.
	outputMax = 4 << 10
)

// Server is a server process of a test's own (a redis-server, an etcd
// member, a postmaster), which the test can kill and restart with the same
// command line, on the same port and data. Its output goes into failure
// messages. It is killed when the test ends.
//
// Server is not safe for concurrent use: the test's goroutine drives it.
type Server struct {
	t      *testing.T
	opts   ServerOptions
	file   string
	args   []string
	output *tail

	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd has exited and been waited for
	reported bool          // a failure message showed the output already
}

// StartServer runs the command file with args and waits until it is up
// (see ServerOptions); it fails the test, with the end of the server's
// output, if the process exits first or does not come up in time. The
// process is killed when the test ends.
func StartServer(t *testing.T, opts ServerOptions, file string, args ...string) *Server {
	t.Helper()
	if opts.Port <= 0 {
		t.Fatalf("leasekittest: StartServer %s: port %d is not positive", file, opts.Port)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = startTimeoutDefault
	}
	if opts.StopSignal == 0 {
		opts.StopSignal = syscall.SIGKILL
	}
	s := &Server{t: t, opts: opts, file: file, args: args, output: &tail{max: outputMax}}
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() && !s.reported {
			t.Logf("output of %s ends:\n%s", s.file, s.output)
		}
	})
	s.start()
	return s
}

// Addr returns the address the server listens on, "127.0.0.1:PORT".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.opts.Port)) }

// Kill ends the process abruptly, as a crash would, with StopSignal, and
// waits for it to exit (after killTimeout it sends SIGKILL). It does
// nothing if the process has exited already.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(s.opts.StopSignal)
	select {
	case <-s.exited:
	case <-time.After(killTimeout):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Restart kills the process if it is still running, starts the same
// command line again, and waits until the server is up, as StartServer
// does.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.start()
}

func (s *Server) start() {
	s.t.Helper()
	cmd := exec.Command(s.file, s.args...)
	cmd.Stdout, cmd.Stderr = s.output, s.output
	// A child of the server that outlives it (a PostgreSQL backend) must
	// not hold Wait up by keeping the output pipe open.
	cmd.WaitDelay = time.Second
	if s.opts.Credential != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.opts.Credential}
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("leasekittest: start %s: %v", s.file, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	s.waitUp()
}

// waitUp polls the server until it is up: a port coming up has nothing to
// wait on. It fails the test at once if the process exits meanwhile.
func (s *Server) waitUp() {
	s.t.Helper()
	deadline := time.Now().Add(s.opts.StartTimeout)
	for {
		err := s.probe()
		if err == nil {
			return
		}
		select {
		case <-s.exited:
			s.reported = true
			s.t.Fatalf("leasekittest: %s exited (%v) before it was up on %s: %v\nits output ends:\n%s",
				s.file, s.cmd.ProcessState, s.Addr(), err, s.output)
		case <-time.After(pollInterval):
		}
		if time.Now().After(deadline) {
			s.reported = true
			s.t.Fatalf("leasekittest: %s was not up on %s within %v: %v\nits output ends:\n%s",
				s.file, s.Addr(), s.opts.StartTimeout, err, s.output)
		}
	}
}

// probe reports why the server is not up yet, or nil.
func (s *Server) probe() error {
	c, err := net.DialTimeout("tcp", s.Addr(), probeTimeout)
	if err != nil {
		return err
	}
	c.Close()
	if s.opts.Ready == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	return s.opts.Ready(ctx)
}

// tail is an io.Writer that keeps the last max bytes written to it. It is
// safe for concurrent use: exec copies stdout and stderr on goroutines of
// their own.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(p), nil
}

// String returns what the tail holds, or "(no output)".
func (w *tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) == 0 {
		return "(no output)"
	}
	return string(w.buf)
}

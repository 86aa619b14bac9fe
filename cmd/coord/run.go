//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"coord/internal/job"
	"coord/lease"
	"coord/lease/eventlog"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// killMargin is how long before the lease can pass to another holder coord
// run sends SIGKILL at the latest: time for the kernel to deliver it and
// for the job to die.
const killMargin = 250 * time.Millisecond

// Exit codes of coord run besides CMD's own.
const (
	// exitConflictDefault: the lease is held by another (-n) or the wait
	// timed out (--timeout). EX_TEMPFAIL of sysexits.h: try again later.
	exitConflictDefault = 75
	// exitLostDefault: the lease was lost while CMD ran, and CMD was
	// stopped. 70 (EX_SOFTWARE's number) is used by neither flock(1) (69
	// when the command cannot be run) nor the shell, and rarely by jobs.
	exitLostDefault = 70
)

// shimCommand is the hidden command that runs job.Init: coord run
// re-executes its own binary (/proc/self/exe, whatever replaced the file
// since) as the job's first process.
const shimCommand = "run-init"

func newRunCmd() *cobra.Command {
	var (
		f            leaseFlags
		grace        time.Duration
		noWait       bool
		wait         bool
		timeout      time.Duration
		conflictCode int
		lostCode     int
		jsonOut      bool
		contain      string
	)
	cmd := &cobra.Command{
		Use:   "run --store URL [flags] -- CMD [ARGS...]",
		Short: "Run a command only while holding a lease",
		Long: `Run CMD only while holding the lease, like flock(1), consul lock and
etcdctl lock. CMD gets COORD_FENCING_TOKEN, COORD_LEASE_HOLDER and
COORD_LEASE_NAME in its environment: pass the token to whatever it writes
to, so that a stale holder's writes can be rejected.

Containment: CMD and everything it starts, double-forked and setsid
daemons included, are dead before the lease can pass to anyone else,
however coord run ends. CMD runs under a small shim (coord run-init) that
is init of its own PID namespace: when it dies the kernel kills every
process in the namespace, and it dies with coord run (PR_SET_PDEATHSIG),
even when coord run is SIGKILLed or OOM-killed. Unprivileged, it uses a
user namespace; where the kernel allows neither, coord run falls back to a
subreaper and says so in one log line (--contain). On file:// the job
inherits the lease's liveness socket, so the lease passes only when the
job's last process has exited; other stores let the lease run to its TTL,
and the shim kills the job before that unless coord run renews it, so a
paused coord run cannot leave its job running into another holder's lease.
On raft:// with ?session=true, coord run keeps a session stream to the
cluster's leader, which frees the lease about 2s after coord run dies
rather than at the TTL; the job then needs a PID namespace (auto means
pidns, and subreaper is refused), so that it dies with coord run.

Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded as themselves
to CMD's process group; if the job has not ended after --grace, all of it
gets SIGKILL; then coord run releases the lease and exits with CMD's
status. SIGUSR1 and SIGUSR2 are forwarded and nothing else happens.
Before the lease is acquired, these signals end the wait (exit 128+N).

Terminal: when coord run is in the foreground of a terminal, CMD's group
gets the terminal while it runs, so CMD reads it and Ctrl-C, Ctrl-\ and
Ctrl-Z reach CMD as they would from a shell; Ctrl-Z stops coord run with
the job and fg resumes both. A stopped coord run does not renew: resume it
within the renew deadline (--ttl/3) or the job is stopped and the lease
is given up.

When the lease is lost (renewals fail for the renew deadline, or the store
reports it taken), CMD's group gets SIGTERM and the job SIGKILL after
--grace, cut short so that SIGKILL lands 250ms before the lease could pass
(at once if it was already taken); coord run exits with --lost-exit-code.

Exit codes: CMD's own status when it ran (128+N when signal N killed it);
127 command not found, 126 not executable; --conflict-exit-code (75) when
the lease is held with -n or the --timeout passed, naming the holder and
token; --lost-exit-code (70) when the lease was lost and CMD stopped; 2 for
a usage error; 1 when coord run itself failed.

Names: file:// names the lease after the lock file. Other stores need
--name, or the name as the URL's fragment (redis://host:6379/0#nightly):
no default name is shared by unrelated jobs.

With --json, coord run writes to stderr (stdout is CMD's) one JSON event
per line, the same as coord elect --json (elected, renewed, lost, released,
leader) plus started, signal, stopped, continued, exited and conflict.

With --metrics-addr ADDR (on loopback only: the page has no TLS or
authentication), the lease's Prometheus metrics are served at
http://ADDR/metrics while coord run runs, the same as coord elect's
(docs/leases.md).`,
		Example: `  coord run --store file:///tmp/cron.lock -- ./nightly-job.sh
  coord run --store file:///tmp/cron.lock -n -- make deploy        # give up at once if held
  coord run --store redis://127.0.0.1:6379/0#backup --timeout 10m --grace 30s -- ./backup.sh`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 {
				return usagef("put the command after --, as in: coord run --store URL -- CMD [ARGS...]")
			}
			if err := f.resolve(cmd, os.Getenv); err != nil {
				return err
			}
			if err := nonNegative("--grace", time.Hour).check(grace); err != nil {
				return err
			}
			if err := nonNegative("--timeout", 365*24*time.Hour).check(timeout); err != nil {
				return err
			}
			for flag, code := range map[string]int{"--conflict-exit-code": conflictCode, "--lost-exit-code": lostCode} {
				if code < 1 || code > 255 {
					return usagef("%s %d: want 1 to 255", flag, code)
				}
			}
			mode, err := job.ParseContainment(contain)
			if err != nil {
				return usagef("--contain %q: want auto, pidns or subreaper", contain)
			}
			if mode, err = sessionContainment(f.store, mode); err != nil {
				return err
			}
			if cmd.Flags().Changed("wait") && !wait {
				noWait = true
			}
			scaled := lease.ScaledConfig(f.ttl)
			scaled.RenewDeadline = f.ttl / 3
			scaled.RenewInterval = f.ttl / 9
			scaled.RetryPeriod = f.ttl / 18
			cfg, err := f.config(scaled)
			if err != nil {
				return err
			}
			path, err := job.LookPath(args[0])
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "coord: %v\n", err)
				return &exitError{code: job.ExitCode(err)}
			}
			b, err := f.openStore(cmd.Context(), &cfg)
			if err != nil {
				return err
			}
			defer b.Close()
			r := &runner{
				path: path, args: args, grace: grace, cfg: cfg,
				noWait: noWait, timeout: timeout, conflictCode: conflictCode, lostCode: lostCode,
				contain: mode, shim: []string{"/proc/self/exe", shimCommand},
				log: slog.Default(), stderr: cmd.ErrOrStderr(),
				terminal: controllingTerminal(os.Stdin),
			}
			if tf, ok := b.(tenureFiler); ok {
				r.tenureFile = tf.TenureFile
			}
			ms, err := startMetrics(f.metricsAddr, f.store, cfg)
			if err != nil {
				return err
			}
			defer ms.stop()
			r.metrics = ms
			b = ms.backend(b)
			if jsonOut {
				r.events = eventlog.NewWriter(cmd.ErrOrStderr(), cfg.Holder)
			}
			// Signals are handled here, not by the root's context: each is
			// forwarded as itself, and the lease is held until the job is
			// gone.
			return r.run(context.WithoutCancel(cmd.Context()), b)
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.DurationVar(&grace, "grace", 5*time.Second, "time between forwarding a stopping signal (or SIGTERM on lease loss) and SIGKILL of the whole job")
	fl.BoolVarP(&noWait, "no-wait", "n", false, "fail at once (--conflict-exit-code) if the lease is held, like flock -n")
	fl.DurationVar(&timeout, "timeout", 0, "give up (--conflict-exit-code) after waiting this long for the lease, like flock -w; 0 waits forever")
	fl.IntVar(&conflictCode, "conflict-exit-code", exitConflictDefault, "exit code when the lease is held (-n) or --timeout passed, like flock -E")
	fl.IntVar(&lostCode, "lost-exit-code", exitLostDefault, "exit code when the lease was lost and CMD stopped")
	fl.BoolVar(&jsonOut, "json", false, "write one JSON event per line to stderr")
	fl.StringVar(&contain, "contain", "auto", "how the job is held together: auto, pidns (PID namespace) or subreaper")
	fl.BoolVar(&wait, "wait", true, "wait for the lease")
	fl.MarkDeprecated("wait", "use -n/--no-wait")
	return cmd
}

// newRunInitCmd is the hidden shim that coord run starts as the job's
// first process (see package job).
func newRunInitCmd() *cobra.Command {
	return &cobra.Command{
		Use:                shimCommand,
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			if code := job.Init(args); code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
}

// tenureFiler is a Backend whose holder's liveness is a descriptor the job
// can inherit (lease/file).
type tenureFiler interface {
	TenureFile(name string, token uint64) (*os.File, error)
}

// controllingTerminal returns f if it is this process's controlling
// terminal, else nil.
func controllingTerminal(f *os.File) *os.File {
	if _, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP); err != nil {
		return nil
	}
	return f
}

// Events of coord run --json beyond coord elect's.
const (
	eventStarted   = "started"   // CMD started; detail: containment
	eventSignal    = "signal"    // coord run got a signal; detail: its name
	eventStopped   = "stopped"   // CMD was stopped (job control); detail: the signal
	eventContinued = "continued" // CMD was continued
	eventExited    = "exited"    // the job ended; detail: exit code or signal
	eventConflict  = "conflict"  // gave up: lease held (-n) or --timeout
)

// runner runs CMD under an Elector.
type runner struct {
	path         string
	args         []string
	grace        time.Duration
	cfg          lease.Config
	noWait       bool
	timeout      time.Duration
	conflictCode int
	lostCode     int
	contain      job.Containment
	shim         []string
	tenureFile   func(name string, token uint64) (*os.File, error)
	log          *slog.Logger
	stderr       io.Writer
	events       *eventlog.Writer // nil without --json
	terminal     *os.File

	elector *lease.Elector
	stops   chan syscall.Signal // stopping signals, for the running job

	mu        sync.Mutex
	expiry    time.Time // when our lease can pass to another, on our clock
	status    job.Status
	elected   bool // OnElected began: -n and --timeout no longer apply
	ran       bool
	startErr  error
	job       *job.Job
	busyBy    *lease.Record // the holder that made us give up
	lastSeen  lease.Record  // the last other holder seen
	timedOut  bool
	lostErr   error
	metrics   *metricsServer // nil without --metrics-addr
	stoppedBy syscall.Signal // a stopping signal received before the job ran
}

func (r *runner) run(ctx context.Context, b lease.Backend) error {
	r.stops = make(chan syscall.Signal, 8)
	r.cfg.Callbacks = lease.Callbacks{
		OnLeaderChanged: r.onLeaderChanged,
		OnRenewed: func(rec lease.Record) {
			r.mu.Lock()
			r.expiry = rec.Expiry
			j := r.job
			r.mu.Unlock()
			r.emit(lease.Event{Event: lease.EventRenewed, Holder: r.cfg.Holder, Token: rec.Token, Expiry: rec.Expiry})
			if j != nil {
				j.SetDeadline(rec.Expiry.Add(-killMargin))
			}
		},
		OnElected: func(ctx context.Context, token uint64) {
			r.mu.Lock()
			r.elected = true
			r.mu.Unlock()
			r.emit(lease.Event{Event: lease.EventElected, Holder: r.cfg.Holder, Token: token})
			st := r.runJob(ctx, token)
			r.mu.Lock()
			r.status, r.ran = st, true
			r.mu.Unlock()
			r.elector.Resign() // the job is over: hand the lease back
		},
		OnLost: func(token uint64, err error) {
			if err == nil {
				r.emit(lease.Event{Event: lease.EventReleased, Holder: r.cfg.Holder, Token: token})
				return
			}
			r.mu.Lock()
			r.lostErr = err
			r.mu.Unlock()
			r.emit(lease.Event{Event: lease.EventLost, Holder: r.cfg.Holder, Token: token, Error: err.Error()})
		},
	}
	r.cfg.Callbacks = r.metrics.callbacks(r.cfg.Callbacks)
	e, err := lease.NewElector(b, r.cfg)
	if err != nil {
		return &usageError{err: err}
	}
	r.elector = e
	stopSignals := r.handleSignals()
	defer stopSignals()
	if r.timeout > 0 {
		timer := time.AfterFunc(r.timeout, func() {
			r.mu.Lock()
			giveUp := !r.elected
			r.timedOut = giveUp
			r.mu.Unlock()
			if giveUp {
				e.Resign()
			}
		})
		defer timer.Stop()
	}
	e.Run(ctx)
	return r.result()
}

// onLeaderChanged notes our own expiry, and who else holds the lease: with
// -n, a holder other than us ends the attempt.
func (r *runner) onLeaderChanged(rec lease.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case rec.Holder == r.cfg.Holder:
		r.expiry = rec.Expiry
		return
	case rec.Holder == "":
		return
	}
	r.lastSeen = rec
	r.emit(lease.Event{Event: lease.EventLeader, Holder: rec.Holder, Token: rec.Token, Expiry: rec.Expiry})
	if r.noWait && !r.elected {
		r.busyBy = &rec
		r.elector.Resign()
	}
}

// result turns how the run ended into coord run's exit.
func (r *runner) result() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	conflict := func(why string) error {
		msg := fmt.Sprintf("lease %q %s", r.cfg.Name, why)
		if r.lastSeen.Holder != "" {
			msg += fmt.Sprintf("; held by %q (token %d)", r.lastSeen.Holder, r.lastSeen.Token)
		}
		fmt.Fprintf(r.stderr, "coord: %s; %s was not run\n", msg, r.args[0])
		r.emit(lease.Event{Event: eventConflict, Holder: r.lastSeen.Holder, Token: r.lastSeen.Token, Detail: why})
		return &exitError{code: r.conflictCode}
	}
	switch {
	case r.busyBy != nil:
		return conflict("is held (-n)")
	case r.timedOut:
		return conflict(fmt.Sprintf("was not acquired within --timeout %v", r.timeout))
	case r.startErr != nil:
		return r.startErr
	case !r.ran && r.stoppedBy != 0:
		return &exitError{code: 128 + int(r.stoppedBy)}
	case !r.ran:
		return fmt.Errorf("stopped before acquiring lease %q; %s was not run", r.cfg.Name, r.args[0])
	}
	if r.lostErr != nil || r.status.Expired {
		why := "its renewals stopped"
		if r.lostErr != nil {
			why = r.lostErr.Error()
		}
		fmt.Fprintf(r.stderr, "coord: lost lease %q; %s was stopped (%s): %s\n", r.cfg.Name, r.args[0], describeStatus(r.status), why)
		return &exitError{code: r.lostCode}
	}
	if r.status.Code != 0 {
		return &exitError{code: r.status.Code}
	}
	return nil
}

// handleSignals forwards signals to the job, or ends the wait for the lease
// when no job runs yet. It returns a function that stops the handling.
func (r *runner) handleSignals() func() {
	sigs := make(chan os.Signal, 8)
	stopping := []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}
	signal.Notify(sigs, append(stopping, syscall.SIGUSR1, syscall.SIGUSR2)...)
	done := make(chan struct{})
	go func() {
		for {
			var sig syscall.Signal
			select {
			case <-done:
				return
			case s := <-sigs:
				sig = s.(syscall.Signal)
			}
			r.emit(lease.Event{Event: eventSignal, Holder: r.cfg.Holder, Detail: unix.SignalName(sig)})
			r.mu.Lock()
			j, ran := r.job, r.ran
			if j == nil && !ran && sig != syscall.SIGUSR1 && sig != syscall.SIGUSR2 && r.stoppedBy == 0 {
				r.stoppedBy = sig
				r.elector.Resign() // stop waiting; a job elected meanwhile sees stops
			}
			r.mu.Unlock()
			switch {
			case sig == syscall.SIGUSR1 || sig == syscall.SIGUSR2:
				if j != nil {
					j.Signal(sig)
				}
			default:
				select {
				case r.stops <- sig:
				default:
				}
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}

// runJob runs CMD as a contained job until it ends, and returns how it
// ended. It forwards stopping signals, and stops the job when the lease is
// lost (ctx cancelled): the job's group gets SIGTERM, and the whole job
// SIGKILL by the deadline the cause allows.
func (r *runner) runJob(ctx context.Context, token uint64) job.Status {
	r.mu.Lock()
	stoppedEarly := r.stoppedBy
	r.mu.Unlock()
	if stoppedEarly != 0 {
		// A signal ended the wait as the lease arrived: do not start.
		return job.Status{Code: 128 + int(stoppedEarly), Signal: stoppedEarly}
	}
	var extra []*os.File
	if r.tenureFile != nil {
		f, err := r.tenureFile(r.cfg.Name, token)
		if err != nil {
			r.log.Warn("coord run: the job does not hold the lease's liveness socket; the lease may pass a moment before a SIGKILLed job is dead", "err", err)
		} else {
			extra = append(extra, f)
			defer f.Close()
		}
	}
	j, err := job.Start(job.Config{
		Path: r.path, Args: r.args,
		Env: append(os.Environ(),
			"COORD_FENCING_TOKEN="+strconv.FormatUint(token, 10),
			"COORD_LEASE_HOLDER="+r.cfg.Holder,
			"COORD_LEASE_NAME="+r.cfg.Name,
		),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		ExtraFiles: extra, Shim: r.shim, Containment: r.contain, Terminal: r.terminal,
		OnEvent: r.onJobEvent, Logger: r.log,
	})
	for _, f := range extra {
		f.Close() // the job has its copy
	}
	if err != nil {
		r.mu.Lock()
		r.startErr = err
		r.mu.Unlock()
		return job.Status{Code: 1, Err: err}
	}
	r.mu.Lock()
	r.job = j
	expiry := r.expiry
	r.mu.Unlock()
	if !expiry.IsZero() {
		j.SetDeadline(expiry.Add(-killMargin))
	}
	return r.supervise(ctx, j)
}

// supervise waits for the job to end, forwarding stopping signals and
// stopping it when the lease is lost.
func (r *runner) supervise(ctx context.Context, j *job.Job) job.Status {
	var killAt <-chan time.Time
	lost := ctx.Done()
	escalate := func(at time.Time) {
		if killAt == nil || time.Until(at) < 0 {
			killAt = time.After(time.Until(at))
		}
	}
	for {
		select {
		case <-j.Done():
			st := j.Wait()
			r.emitExit(st)
			return st
		case sig := <-r.stops:
			j.Signal(sig)
			escalate(r.killDeadline(nil))
		case <-lost:
			lost = nil
			cause := context.Cause(ctx)
			if errors.Is(cause, lease.ErrResigned) {
				// A stopping signal arrived as the job started; it was
				// forwarded through r.stops.
				continue
			}
			at := r.killDeadline(cause)
			if time.Until(at) > 0 {
				r.log.Info("coord run: stopping command", "signal", "SIGTERM", "sigkill_in", time.Until(at).Round(time.Millisecond), "cause", cause)
				j.Signal(syscall.SIGTERM)
			}
			escalate(at)
		case <-killAt:
			r.log.Info("coord run: stopping the whole job", "signal", "SIGKILL")
			j.Kill()
			killAt = nil
		}
	}
}

// killDeadline returns when the job must get SIGKILL: after the grace
// period, but no later than killMargin before the lease can pass to
// another, and at once when it has passed already.
func (r *runner) killDeadline(cause error) time.Time {
	now := time.Now()
	if errors.Is(cause, lease.ErrLost) {
		return now
	}
	r.mu.Lock()
	latest := r.expiry.Add(-killMargin)
	r.mu.Unlock()
	killAt := now.Add(r.grace)
	if latest.Before(killAt) {
		r.log.Warn("coord run: grace period cut short so that the job is dead before the lease can pass", "grace", r.grace, "left", latest.Sub(now).Round(time.Millisecond))
		killAt = latest
	}
	return killAt
}

// onJobEvent reports the job's events.
func (r *runner) onJobEvent(ev job.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := lease.Event{Holder: r.cfg.Holder, Token: r.elector.Token()}
	switch ev.Kind {
	case job.EventStarted:
		out.Event, out.Detail = eventStarted, ev.Detail
	case job.EventStopped:
		out.Event, out.Detail = eventStopped, unix.SignalName(ev.Signal)
	case job.EventContinued:
		out.Event = eventContinued
	default:
		return // the end is reported once the whole job is gone
	}
	r.emit(out)
}

// emitExit reports the end of the job.
func (r *runner) emitExit(st job.Status) {
	ev := lease.Event{Event: eventExited, Holder: r.cfg.Holder, Token: r.elector.Token(), Detail: describeStatus(st)}
	if st.Err != nil {
		ev.Error = st.Err.Error()
	}
	r.emit(ev)
}

// describeStatus says how a job ended: "exit 3", "SIGTERM (143)".
func describeStatus(st job.Status) string {
	if st.Signal != 0 {
		s := fmt.Sprintf("%s (%d)", unix.SignalName(st.Signal), st.Code)
		if st.Expired {
			s += ", killed at the lease's deadline"
		}
		return s
	}
	return "exit " + strconv.Itoa(st.Code)
}

func (r *runner) emit(ev lease.Event) {
	if r.events != nil {
		r.events.Write(ev)
	}
}

// sessionContainment returns the containment a job needs under store. A
// raft:// session (?session=true) frees the lease a grace period after
// coord run dies, so the job must die with coord run, in the kernel's exit
// path: only a PID namespace does that (a subreaper shim is user code that
// may itself be killed, and the job then outlives the lease). auto becomes
// pidns: the job fails to start rather than fall back.
func sessionContainment(store string, mode job.Containment) (job.Containment, error) {
	u, err := url.Parse(store)
	if err != nil || u.Scheme != "raft" {
		return mode, nil
	}
	on, err := strconv.ParseBool(u.Query().Get("session"))
	if err != nil || !on {
		return mode, nil // the store reports a malformed value itself
	}
	if mode == job.Subreaper {
		return mode, usagef("--contain subreaper with a raft:// session: the cluster frees the lease soon after coord run dies, and only --contain pidns (or auto) kills the job with it")
	}
	return job.PIDNamespace, nil
}

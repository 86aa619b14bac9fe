package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"coord/lease"

	"github.com/spf13/cobra"
)

// killMargin is how long before the lease can pass to another holder coord
// run sends SIGKILL at the latest: time for the kernel to deliver it and
// for the process group to die.
const killMargin = 250 * time.Millisecond

func newRunCmd() *cobra.Command {
	var (
		f     leaseFlags
		grace time.Duration
		wait  bool
	)
	cmd := &cobra.Command{
		Use:   "run --store URL [flags] -- CMD [ARGS...]",
		Short: "Run a command only while holding a lease",
		Long: `Run CMD only while holding the lease, like flock(1), consul lock and
etcdctl lock. CMD gets COORD_FENCING_TOKEN, COORD_LEASE_HOLDER and
COORD_LEASE_NAME in its environment: pass the token to whatever it writes
to, so that a stale holder's writes can be rejected.

CMD runs in its own process group. When the lease is lost, the group gets
SIGTERM, then SIGKILL after --grace, and coord run waits for CMD to die.
The grace is cut short so that SIGKILL lands at least 250ms before the
lease could pass to anyone else: coord run's renew deadline is a third of
the TTL, so after a failed renewal two thirds of the TTL are left (6s of
the default 9s, enough for the default 5s grace). When the store reports
the lease already taken (this process was paused past its TTL), CMD gets
SIGKILL at once: it was already running unprotected, which is what fencing
tokens are for. If coord run itself is killed with SIGKILL, the kernel
sends CMD SIGKILL too (PR_SET_PDEATHSIG), but the lease may pass a few
milliseconds before CMD is dead.

SIGTERM or SIGINT to coord run stops CMD the same way (SIGTERM, grace,
SIGKILL), then releases the lease at once. CMD's exit status passes
through (128+N when it died of signal N). With --wait=false, coord run
exits 1 at once if the lease is held by someone else.`,
		Example: `  coord run --store file:///tmp/cron.lock -- ./nightly-job.sh
  coord run --store file:///tmp/cron.lock --wait=false --grace 10s -- make deploy`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 {
				return usagef("put the command after --, as in: coord run --store URL -- CMD [ARGS...]")
			}
			if grace < 0 {
				return usagef("--grace %v is negative", grace)
			}
			scaled := lease.ScaledConfig(f.ttl)
			scaled.RenewDeadline = f.ttl / 3
			scaled.RenewInterval = f.ttl / 9
			scaled.RetryPeriod = f.ttl / 18
			cfg, err := f.config(scaled)
			if err != nil {
				return err
			}
			if _, err := exec.LookPath(args[0]); err != nil {
				return usagef("command %q: %v", args[0], err)
			}
			b, err := f.openStore(cmd.Context(), &cfg)
			if err != nil {
				return err
			}
			defer b.Close()
			r := &runner{args: args, grace: grace, cfg: cfg, log: slog.Default(), stderr: cmd.ErrOrStderr()}
			return r.run(cmd.Context(), b, wait)
		},
	}
	f.register(cmd)
	cmd.Flags().DurationVar(&grace, "grace", 5*time.Second, "time between SIGTERM and SIGKILL when CMD must stop")
	cmd.Flags().BoolVar(&wait, "wait", true, "wait for the lease; with --wait=false, exit 1 at once if it is held")
	return cmd
}

// runner runs CMD under an Elector.
type runner struct {
	args   []string
	grace  time.Duration
	cfg    lease.Config
	log    *slog.Logger
	stderr io.Writer

	mu       sync.Mutex
	expiry   time.Time // when our lease can pass to another, on our clock
	exitCode int       // CMD's exit status once it ran
	ran      bool
	busyBy   *lease.Record // --wait=false: who held the lease
	lostErr  error
}

func (r *runner) run(ctx context.Context, b lease.Backend, wait bool) error {
	var e *lease.Elector
	r.cfg.Callbacks = lease.Callbacks{
		OnLeaderChanged: func(rec lease.Record) {
			r.mu.Lock()
			defer r.mu.Unlock()
			switch {
			case rec.Holder == r.cfg.Holder:
				r.expiry = rec.Expiry
			case rec.Holder != "" && !wait && !r.ran:
				r.busyBy = &rec
				e.Resign()
			}
		},
		OnRenewed: func(rec lease.Record) {
			r.mu.Lock()
			r.expiry = rec.Expiry
			r.mu.Unlock()
		},
		OnElected: func(ctx context.Context, token uint64) {
			code := r.runChild(ctx, token)
			r.mu.Lock()
			r.exitCode, r.ran = code, true
			r.mu.Unlock()
			e.Resign() // CMD is done (or stopped): hand the lease back
		},
		OnLost: func(token uint64, err error) {
			if err != nil {
				r.mu.Lock()
				r.lostErr = err
				r.mu.Unlock()
			}
		},
	}
	e, err := lease.NewElector(b, r.cfg)
	if err != nil {
		return &usageError{err: err}
	}
	if err := e.Run(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.busyBy != nil:
		return fmt.Errorf("lease %q is held by %q (token %d); not waiting (--wait=false)", r.cfg.Name, r.busyBy.Holder, r.busyBy.Token)
	case !r.ran:
		return fmt.Errorf("stopped before acquiring lease %q; %s was not run", r.cfg.Name, r.args[0])
	}
	if r.lostErr != nil {
		fmt.Fprintf(r.stderr, "coord: lost lease %q; %s was stopped (exit status %d): %v\n", r.cfg.Name, r.args[0], r.exitCode, r.lostErr)
	}
	if r.exitCode != 0 {
		return &exitError{code: r.exitCode}
	}
	return nil
}

// runChild runs CMD until it exits or ctx is cancelled, and returns its
// exit status. On cancellation it stops CMD's process group: SIGTERM, then
// SIGKILL at the deadline the cause allows, and waits for it to exit.
func (r *runner) runChild(ctx context.Context, token uint64) int {
	cmd := exec.Command(r.args[0], r.args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		"COORD_FENCING_TOKEN="+strconv.FormatUint(token, 10),
		"COORD_LEASE_HOLDER="+r.cfg.Holder,
		"COORD_LEASE_NAME="+r.cfg.Name,
	)
	// Its own group, so that stopping it stops its children too; and
	// SIGKILL from the kernel if coord run dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		r.log.Error("coord run: start command", "cmd", r.args[0], "err", err)
		return 127
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
		return exitStatus(cmd.ProcessState)
	case <-ctx.Done():
	}
	pgid := cmd.Process.Pid
	killAt := r.killDeadline(context.Cause(ctx))
	if time.Until(killAt) > 0 {
		syscall.Kill(-pgid, syscall.SIGTERM)
		r.log.Info("coord run: stopping command", "signal", "SIGTERM", "sigkill_in", time.Until(killAt).Round(time.Millisecond), "cause", context.Cause(ctx))
		select {
		case <-exited:
			return exitStatus(cmd.ProcessState)
		case <-time.After(time.Until(killAt)):
		}
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	r.log.Info("coord run: stopping command", "signal", "SIGKILL", "cause", context.Cause(ctx))
	<-exited
	return exitStatus(cmd.ProcessState)
}

// killDeadline returns when CMD must get SIGKILL: after the grace period,
// but no later than killMargin before the lease can pass to another, and at
// once when it has passed already.
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
		r.log.Warn("coord run: grace period cut short so that the command is dead before the lease can pass", "grace", r.grace, "left", latest.Sub(now).Round(time.Millisecond))
		killAt = latest
	}
	return killAt
}

// exitStatus returns a process's exit code, or 128+N if signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"coord/bench"
	"coord/bench/failover"
	"coord/lease"

	"github.com/spf13/cobra"
)

// benchCommands are the subcommands of coord bench. A benchmark in another
// file joins with one line:
//
//	func init() { registerBench(newBenchLatencyCmd) }
var benchCommands []func() *cobra.Command

// registerBench adds a subcommand to coord bench.
func registerBench(newCmd func() *cobra.Command) { benchCommands = append(benchCommands, newCmd) }

func init() { registerBench(newBenchFailoverCmd) }

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure leases: failover gaps and store latency",
		Long: `Measure leases with real processes and real stores: the leaderless gap
after a leader is killed (failover), the cost of each lease operation beside
the store's plain round trip (latency), and a node's memory under a burst
of watches (watches). Each prints a table, or one JSON object with --json.`,
		Example: `  coord bench failover --trials 20 --baseline-trials 0
  coord bench latency --json
  coord bench watches --watches 1000`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	for _, newCmd := range benchCommands {
		cmd.AddCommand(newCmd())
	}
	return cmd
}

// failoverFlags configure coord bench failover.
type failoverFlags struct {
	trials         int
	baselineTrials int
	parallel       int
	contenders     int
	store          string
	ttl            time.Duration
	kinds          []string
	jsonOut        bool
	freezeOne      bool
	check          bool
	baseline       failover.Timings // hidden flags, for quick tests
}

func newBenchFailoverCmd() *cobra.Command {
	var f failoverFlags
	cmd := &cobra.Command{
		Use:   "failover",
		Short: "Leaderless gap after SIGKILL and SIGTERM of the leader: coord's lease vs the articles'",
		Long: `Measure how long the system has no leader after the leader is killed, with
real processes: --contenders processes of 'coord elect --json' compete; once
all agree on a leader, it gets SIGKILL (or SIGTERM), and the gap is the time
from the signal to another process's "elected" event (CLOCK_MONOTONIC, which
all processes share). The killed process is replaced and the next trial
starts, --trials times per signal.

In the same run, the articles' lease program (9 s lease, 3 s renew, 3 s
watch; 'coord articles lease') is measured the same way as the baseline.
Its trials take about 10 s each, so --parallel groups run at once, each on
its own lock file; --baseline-trials 0 skips it.

Targets: for the file store (the default), coord's p99 gap should be
below 50 ms after SIGKILL and below 10 ms after SIGTERM; each is reported
as "target met" or "target missed". No target applies to the other stores:
they learn of a killed holder at its expiry, so that the gap after SIGKILL
is the TTL by design (but raft:// with ?session=true, which learns of it
when the holder's session stream closes, after a 2 s grace). A miss is reported, and the exit status is 0 unless
--check, which exits 1 on a miss (for CI on a quiet machine).

With --json, one JSON object: the command, the machine, the settings,
every trial's gap, and the targets checked.`,
		Example: `  coord bench failover
  coord bench failover --trials 20 --baseline-trials 10
  coord bench failover --kinds kill --store file:///var/tmp/bench.lock --json
  coord bench failover --trials 50 --baseline-trials 0 --check      # exit 1 if a target is missed`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.store = storeFromEnv(cmd, f.store, os.Getenv)
			return runFailoverBench(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f)
		},
	}
	def := failover.DefaultConfig()
	fl := cmd.Flags()
	fl.IntVar(&f.trials, "trials", def.Trials, "trials per signal for coord")
	fl.IntVar(&f.baselineTrials, "baseline-trials", def.BaselineTrials, "trials per signal for the articles' lease (0: skip)")
	fl.IntVar(&f.parallel, "parallel", def.Parallel, "articles' trial groups running at once")
	fl.IntVar(&f.contenders, "contenders", def.Contenders, "processes competing in each group")
	fl.StringVar(&f.store, "store", "", "coord's lease store (default $"+envStore+", else a lock file in a temporary directory)")
	fl.DurationVar(&f.ttl, "ttl", def.TTL, fmt.Sprintf("coord's lease TTL (%v to %v)", ttlBounds.min, ttlBounds.max))
	fl.StringSliceVar(&f.kinds, "kinds", []string{"kill", "term"}, "signals to measure: kill (SIGKILL), term (SIGTERM)")
	addJSONFlag(cmd, &f.jsonOut, "print one JSON object with every gap and the targets checked")
	fl.BoolVar(&f.check, "check", false, "exit 1 if coord misses a target that applies to its store")
	fl.BoolVar(&f.freezeOne, "freeze-one", false, "add a contender stopped (SIGSTOP) inside its compare-and-swap for the whole run (file store only)")
	// The articles' timings are the point of the baseline; tests shorten them.
	fl.DurationVar(&f.baseline.Lease, "baseline-lease", def.Baseline.Lease, "the articles' LEASE_DURATION")
	fl.DurationVar(&f.baseline.Renew, "baseline-renew", def.Baseline.Renew, "the articles' RENEW_INTERVAL")
	fl.DurationVar(&f.baseline.Watch, "baseline-watch", def.Baseline.Watch, "the articles' WATCH_INTERVAL")
	for _, name := range []string{"baseline-lease", "baseline-renew", "baseline-watch"} {
		fl.MarkHidden(name)
	}
	return cmd
}

// runFailoverBench turns the flags into a failover.Config, runs it
// (bench/failover) and prints the figures.
func runFailoverBench(ctx context.Context, stdout, stderr io.Writer, f failoverFlags) error {
	if err := ttlBounds.check(f.ttl); err != nil {
		return err
	}
	signals := map[string]syscall.Signal{"kill": syscall.SIGKILL, "term": syscall.SIGTERM}
	cfg := failover.Config{Store: f.store, Trials: f.trials, BaselineTrials: f.baselineTrials, Parallel: f.parallel,
		Contenders: f.contenders, TTL: f.ttl, Baseline: f.baseline, FreezeOne: f.freezeOne}
	for _, k := range f.kinds {
		sig, ok := signals[k]
		if !ok {
			return usagef("--kinds %q: want kill or term", k)
		}
		cfg.Signals = append(cfg.Signals, sig)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "coord-bench-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg.Binary, cfg.Dir = self, dir
	if err := cfg.Validate(); err != nil {
		return &usageError{err: err}
	}
	if f.store != "" {
		b, err := lease.Open(ctx, f.store)
		if err != nil {
			return &usageError{err: fmt.Errorf("--store: %w", err)}
		}
		b.Close()
	}
	cfg.Progress = func(format string, args ...any) { fmt.Fprintf(stderr, "bench: "+format+"\n", args...) }
	results, runErr := failover.Run(ctx, cfg)
	if errors.Is(runErr, failover.ErrInvalid) {
		return &usageError{err: runErr}
	}
	if runErr != nil && !errors.Is(runErr, ctx.Err()) {
		return runErr
	}
	targets := failover.CheckTargets(cfg.Store, results)
	if f.jsonOut {
		if targets == nil {
			targets = []failover.TargetResult{}
		}
		err := writeJSON(stdout, map[string]any{
			"command": "coord bench failover " + strings.Join(os.Args[min(3, len(os.Args)):], " "),
			"machine": bench.Machine(), "ttl": f.ttl.String(), "contenders": f.contenders, "results": results,
			"targets": targets,
		})
		if err != nil {
			return err
		}
	} else {
		failover.WriteText(stdout, cfg, results)
	}
	if runErr != nil {
		return runErr // an interrupted run printed what it measured, and fails
	}
	if f.check {
		return targetMisses(targets)
	}
	return nil
}

// targetMisses returns an error naming every target missed, or nil.
func targetMisses(targets []failover.TargetResult) error {
	var missed []string
	for _, t := range targets {
		if !t.Met {
			missed = append(missed, fmt.Sprintf("%s p99 %s, not below %.0fms", t.Signal, bench.FormatMS(t.P99MS), t.P99MSLT))
		}
	}
	if len(missed) > 0 {
		return fmt.Errorf("--check: target missed: %s", strings.Join(missed, "; "))
	}
	return nil
}

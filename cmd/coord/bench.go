package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"coord/lease"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
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
		Args:  usageArgs(cobra.NoArgs),
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
	baseline       articlesTimings // hidden flags, for quick tests
}

// articlesTimings are the articles' lease program's intervals.
type articlesTimings struct{ lease, renew, watch time.Duration }

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
its own lock file; --baseline-trials 0 skips it.`,
		Example: `  coord bench failover
  coord bench failover --trials 20 --baseline-trials 10
  coord bench failover --kinds kill --store file:///var/tmp/bench.lock --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runFailoverBench(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.trials, "trials", 100, "trials per signal for coord")
	fl.IntVar(&f.baselineTrials, "baseline-trials", 100, "trials per signal for the articles' lease (0: skip)")
	fl.IntVar(&f.parallel, "parallel", 25, "articles' trial groups running at once")
	fl.IntVar(&f.contenders, "contenders", 3, "processes competing in each group")
	fl.StringVar(&f.store, "store", "", "coord's lease store (default: a lock file in a temporary directory)")
	fl.DurationVar(&f.ttl, "ttl", 9*time.Second, "coord's lease TTL")
	fl.StringSliceVar(&f.kinds, "kinds", []string{"kill", "term"}, "signals to measure: kill (SIGKILL), term (SIGTERM)")
	fl.BoolVar(&f.jsonOut, "json", false, "print the results as JSON")
	fl.BoolVar(&f.freezeOne, "freeze-one", false, "add a contender stopped (SIGSTOP) inside its compare-and-swap for the whole run (file store only)")
	// The articles' timings are the point of the baseline; tests shorten them.
	fl.DurationVar(&f.baseline.lease, "baseline-lease", 9*time.Second, "the articles' LEASE_DURATION")
	fl.DurationVar(&f.baseline.renew, "baseline-renew", 3*time.Second, "the articles' RENEW_INTERVAL")
	fl.DurationVar(&f.baseline.watch, "baseline-watch", 3*time.Second, "the articles' WATCH_INTERVAL")
	for _, name := range []string{"baseline-lease", "baseline-renew", "baseline-watch"} {
		fl.MarkHidden(name)
	}
	return cmd
}

// gapStats summarises the gaps of one configuration.
type gapStats struct {
	Impl     string  `json:"impl"`
	Signal   string  `json:"signal"`
	Trials   int     `json:"trials"`
	Failed   int     `json:"failed"`
	MinMS    float64 `json:"min_ms"`
	MedianMS float64 `json:"median_ms"`
	P99MS    float64 `json:"p99_ms"`
	MaxMS    float64 `json:"max_ms"`
	// FromReleaseMedianMS is, for SIGTERM, the median time from the old
	// leader's "released" event to the new leader's "elected".
	FromReleaseMedianMS float64   `json:"from_release_median_ms,omitempty"`
	GapsMS              []float64 `json:"gaps_ms"`
}

func summarize(impl, signal string, gaps, fromRelease []time.Duration, failed int) gapStats {
	s := gapStats{Impl: impl, Signal: signal, Trials: len(gaps), Failed: failed}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	if len(gaps) > 0 {
		sorted := slices.Clone(gaps)
		slices.Sort(sorted)
		s.MinMS, s.MedianMS, s.P99MS, s.MaxMS = ms(sorted[0]), ms(percentile(sorted, 50)), ms(percentile(sorted, 99)), ms(sorted[len(sorted)-1])
		for _, g := range gaps {
			s.GapsMS = append(s.GapsMS, ms(g))
		}
	}
	if len(fromRelease) > 0 {
		sorted := slices.Clone(fromRelease)
		slices.Sort(sorted)
		s.FromReleaseMedianMS = ms(percentile(sorted, 50))
	}
	return s
}

// percentile returns the nearest-rank percentile p of sorted values.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(rank, 1)-1]
}

func runFailoverBench(ctx context.Context, stdout, stderr io.Writer, f failoverFlags) error {
	signals := map[string]syscall.Signal{"kill": syscall.SIGKILL, "term": syscall.SIGTERM}
	for _, k := range f.kinds {
		if _, ok := signals[k]; !ok {
			return usagef("--kinds %q: want kill or term", k)
		}
	}
	switch {
	case f.trials < 1:
		return usagef("--trials %d: want at least 1", f.trials)
	case f.baselineTrials < 0:
		return usagef("--baseline-trials %d is negative", f.baselineTrials)
	case f.parallel < 1:
		return usagef("--parallel %d: want at least 1", f.parallel)
	case f.contenders < 2:
		return usagef("--contenders %d: want at least 2", f.contenders)
	case f.baseline.lease <= 0 || f.baseline.renew <= 0 || f.baseline.watch <= 0:
		return usagef("the articles' timings must be positive")
	case f.ttl <= 0:
		return usagef("--ttl %v is not positive", f.ttl)
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
	store, name := f.store, "leader.lock"
	if store == "" {
		store = "file://" + filepath.Join(dir, "leader.lock")
	} else {
		name = fmt.Sprintf("bench-%d", os.Getpid())
		b, err := lease.Open(ctx, store)
		if err != nil {
			return &usageError{err: fmt.Errorf("--store: %w", err)}
		}
		b.Close()
	}
	progress := func(format string, args ...any) { fmt.Fprintf(stderr, "bench: "+format+"\n", args...) }
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	if f.freezeOne {
		stop, err := startFrozenContender(self, store, name, f.ttl)
		if err != nil {
			return err
		}
		defer stop()
		progress("one more contender is stopped inside its compare-and-swap for the whole run")
	}

	var results []gapStats
	for _, kind := range f.kinds {
		sig := signals[kind]
		progress("coord, %s: %d trials, TTL %v, %d contenders, store %s", sig, f.trials, f.ttl, f.contenders, store)
		spawn := func(i int) (*benchProc, error) {
			id := "c" + strconv.Itoa(i)
			return startBenchProc(self, id, "elect", "--store", store, "--name", name, "--id", id, "--json", "--ttl", f.ttl.String())
		}
		g := &benchGroup{spawn: spawn, contenders: f.contenders, rng: rng, phaseMax: 50 * time.Millisecond, timeout: 3*f.ttl + 30*time.Second, progress: progress}
		gaps, fromRelease, failed := g.run(ctx, sig, f.trials)
		results = append(results, summarize("coord", sig.String(), gaps, fromRelease, failed))
		if ctx.Err() != nil {
			break
		}
	}
	if f.baselineTrials > 0 && ctx.Err() == nil {
		for _, kind := range f.kinds {
			sig := signals[kind]
			results = append(results, runBaseline(ctx, self, dir, sig, f, progress))
			if ctx.Err() != nil {
				break
			}
		}
	}
	if f.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err := enc.Encode(map[string]any{
			"command": "coord bench failover " + strings.Join(os.Args[min(3, len(os.Args)):], " "),
			"machine": machineSummary(), "ttl": f.ttl.String(), "contenders": f.contenders, "results": results,
		})
		if err != nil {
			return err
		}
	} else {
		printFailover(stdout, f, results)
	}
	return ctx.Err() // an interrupted run printed what it measured, and fails
}

// startFrozenContender starts one more `coord elect` that stops itself
// (SIGSTOP) inside its first compare-and-swap, through the file store's
// test hook (COORD_FILE_TEST_STOP), and waits until it is stopped. stop
// kills it. With a store that has no such hook it never stops: an error.
func startFrozenContender(self, store, name string, ttl time.Duration) (stop func(), err error) {
	cmd := exec.Command(self, "elect", "--store", store, "--name", name, "--id", "frozen", "--json", "--ttl", ttl.String())
	cmd.Env = append(os.Environ(), "COORD_FILE_TEST_STOP=before-commit")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
	stopped := make(chan error, 1)
	go func() {
		var info unix.Siginfo
		stopped <- unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WSTOPPED|unix.WNOWAIT, nil)
	}()
	select {
	case err := <-stopped:
		if err != nil {
			stop()
			return nil, fmt.Errorf("--freeze-one: %w", err)
		}
		return stop, nil
	case <-time.After(3*ttl + 30*time.Second):
		stop()
		return nil, usagef("--freeze-one: the extra contender never stopped inside its compare-and-swap (only the file store has that test hook)")
	}
}

// runBaseline measures the articles' lease program: f.parallel groups, each
// on its own lock file, share the trials.
func runBaseline(ctx context.Context, self, dir string, sig syscall.Signal, f failoverFlags, progress func(string, ...any)) gapStats {
	groups := min(f.parallel, f.baselineTrials)
	tm := f.baseline
	perTrial := tm.lease + 2*tm.watch
	progress("articles' lease (%v/%v/%v), %s: %d trials in %d parallel groups (about %v)", tm.lease, tm.renew, tm.watch, sig, f.baselineTrials, groups,
		(perTrial * time.Duration((f.baselineTrials+groups-1)/groups)).Round(time.Second))
	var (
		mu                  sync.Mutex
		gaps, fromRelease   []time.Duration
		failed              int
		wg                  sync.WaitGroup
		quiet               = func(string, ...any) {}
		articlesTrialPeriod = max(tm.renew, tm.watch)
	)
	for i := range groups {
		trials := f.baselineTrials / groups
		if i < f.baselineTrials%groups {
			trials++
		}
		lock := filepath.Join(dir, fmt.Sprintf("articles-%s-%d.lock", strings.ToLower(sig.String()), i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			spawn := func(int) (*benchProc, error) {
				return startBenchProc(self, "", "articles", "lease", lock, "--json",
					"--lease", tm.lease.String(), "--renew", tm.renew.String(), "--watch", tm.watch.String())
			}
			seed := uint64(time.Now().UnixNano()) + uint64(i)
			g := &benchGroup{spawn: spawn, contenders: f.contenders, rng: rand.New(rand.NewPCG(seed, 11)),
				phaseMax: articlesTrialPeriod, staggerMax: articlesTrialPeriod, timeout: 3*perTrial + 30*time.Second, progress: quiet}
			gs, fr, fl := g.run(ctx, sig, trials)
			mu.Lock()
			gaps, fromRelease, failed = append(gaps, gs...), append(fromRelease, fr...), failed+fl
			mu.Unlock()
		}()
	}
	wg.Wait()
	return summarize("articles", sig.String(), gaps, fromRelease, failed)
}

func printFailover(w io.Writer, f failoverFlags, results []gapStats) {
	articles := ""
	if f.baselineTrials > 0 {
		articles = fmt.Sprintf("; articles %v/%v/%v", f.baseline.lease, f.baseline.renew, f.baseline.watch)
	}
	fmt.Fprintf(w, "Leaderless gap after the leader is signalled (%d contenders; coord TTL %v%s)\n", f.contenders, f.ttl, articles)
	fmt.Fprintf(w, "machine: %s\n\n", machineSummary())
	fmt.Fprintf(w, "%-9s %-8s %7s %10s %10s %10s %10s\n", "impl", "signal", "trials", "min", "median", "p99", "max")
	median := map[string]float64{}
	for _, r := range results {
		fmt.Fprintf(w, "%-9s %-8s %7d %10s %10s %10s %10s", r.Impl, shortSignal(r.Signal), r.Trials, fmtMS(r.MinMS), fmtMS(r.MedianMS), fmtMS(r.P99MS), fmtMS(r.MaxMS))
		if r.Failed > 0 {
			fmt.Fprintf(w, "  (%d trials failed)", r.Failed)
		}
		if r.FromReleaseMedianMS > 0 {
			fmt.Fprintf(w, "  (median from release: %s)", fmtMS(r.FromReleaseMedianMS))
		}
		fmt.Fprintln(w)
		median[r.Impl+r.Signal] = r.MedianMS
	}
	fmt.Fprintln(w)
	for _, r := range results {
		if base, ok := median["articles"+r.Signal]; ok && r.Impl == "coord" && r.MedianMS > 0 {
			fmt.Fprintf(w, "%s: the articles' median gap is %.0fx coord's\n", shortSignal(r.Signal), base/r.MedianMS)
		}
	}
	targets := map[string]float64{"killed": 50, "terminated": 10}
	for _, r := range results {
		if limit, ok := targets[r.Signal]; ok && r.Impl == "coord" && r.Trials > 0 {
			verdict := "met"
			if r.P99MS >= limit {
				verdict = "MISSED"
			}
			fmt.Fprintf(w, "target %s p99 < %.0fms: %s (%s)\n", shortSignal(r.Signal), limit, verdict, fmtMS(r.P99MS))
		}
	}
}

func shortSignal(s string) string {
	switch s {
	case syscall.SIGKILL.String():
		return "SIGKILL"
	case syscall.SIGTERM.String():
		return "SIGTERM"
	}
	return s
}

func fmtMS(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%.2fs", ms/1000)
	}
	return fmt.Sprintf("%.2fms", ms)
}

// machineSummary describes the machine for the record.
func machineSummary() string {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	model := ""
	if cpuinfo, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(cpuinfo), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s/%s, Linux %s, %s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH, strings.TrimSpace(string(kernel)), runtime.Version())
}

// benchProc is one participant process and its events.
type benchProc struct {
	cmd    *exec.Cmd
	stdout io.ReadCloser
	holder string // the holder name it records: its --id, or its pid
	exited chan struct{}

	// Owned by the group's goroutine.
	lastLeader string // holder of its last "leader" event
}

// procEvent is an event from a process; ev is zero when the process's output
// ended.
type procEvent struct {
	p   *benchProc
	ev  lease.Event
	eof bool
}

// startBenchProc starts the coord binary with args; id is its holder name,
// or "" to use its pid (the articles' programs).
func startBenchProc(self, id string, args ...string) (*benchProc, error) {
	cmd := exec.Command(self, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &benchProc{cmd: cmd, stdout: stdout, holder: id, exited: make(chan struct{})}
	if id == "" {
		p.holder = strconv.Itoa(cmd.Process.Pid)
	}
	return p, nil
}

// benchGroup runs trials against one lease with a fixed number of live
// contenders. It is not safe for concurrent use.
type benchGroup struct {
	spawn      func(i int) (*benchProc, error)
	contenders int
	rng        *rand.Rand
	phaseMax   time.Duration // random wait before each kill
	staggerMax time.Duration // random wait before each start
	timeout    time.Duration // for each wait
	progress   func(string, ...any)

	events  chan procEvent
	live    []*benchProc
	leader  *benchProc
	spawned int
}

func (g *benchGroup) start(ctx context.Context) error {
	if g.staggerMax > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(g.rng.Int64N(int64(g.staggerMax)))):
		}
	}
	g.spawned++
	p, err := g.spawn(g.spawned)
	if err != nil {
		return err
	}
	g.live = append(g.live, p)
	go func() {
		sc := bufio.NewScanner(p.stdout)
		for sc.Scan() {
			var ev lease.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				g.events <- procEvent{p: p, ev: ev}
			}
		}
		p.cmd.Wait()
		close(p.exited)
		g.events <- procEvent{p: p, eof: true}
	}()
	return nil
}

// handle updates the group's view with one event.
func (g *benchGroup) handle(pe procEvent) {
	switch {
	case pe.eof:
		g.live = slices.DeleteFunc(g.live, func(p *benchProc) bool { return p == pe.p })
		if g.leader == pe.p {
			g.leader = nil
		}
	case pe.ev.Event == lease.EventElected:
		g.leader = pe.p
	case pe.ev.Event == lease.EventLeader:
		pe.p.lastLeader = pe.ev.Holder
	case pe.ev.Event == lease.EventReleased || pe.ev.Event == lease.EventLost:
		if g.leader == pe.p {
			g.leader = nil
		}
	}
}

// next returns the next event, or an error on timeout or ctx.
func (g *benchGroup) next(ctx context.Context, deadline <-chan time.Time) (procEvent, error) {
	select {
	case pe := <-g.events:
		g.handle(pe)
		return pe, nil
	case <-deadline:
		return procEvent{}, errors.New("timed out")
	case <-ctx.Done():
		return procEvent{}, ctx.Err()
	}
}

// steady reports whether one leader is known and every other live process
// has seen it.
func (g *benchGroup) steady() bool {
	if g.leader == nil || len(g.live) < g.contenders {
		return false
	}
	for _, p := range g.live {
		if p != g.leader && p.lastLeader != g.leader.holder {
			return false
		}
	}
	return true
}

// run runs trials with sig and returns the gaps (and, for SIGTERM, the gaps
// measured from the old leader's release), and the number of failed trials.
func (g *benchGroup) run(ctx context.Context, sig syscall.Signal, trials int) (gaps, fromRelease []time.Duration, failed int) {
	g.events = make(chan procEvent, 4096)
	defer g.stopAll()
	for range g.contenders {
		if err := g.start(ctx); err != nil {
			g.progress("start: %v", err)
			return nil, nil, trials
		}
	}
	for trial := 0; trial < trials && ctx.Err() == nil; trial++ {
		gap, rel, err := g.trial(ctx, sig)
		if err != nil {
			failed++
			g.progress("trial %d: %v", trial+1, err)
			if failed > trials/10+2 {
				g.progress("too many failed trials; giving up")
				return gaps, fromRelease, failed + trials - trial - 1
			}
			continue
		}
		gaps = append(gaps, gap)
		if rel > 0 {
			fromRelease = append(fromRelease, rel)
		}
		if (trial+1)%20 == 0 {
			g.progress("%d/%d trials", trial+1, trials)
		}
	}
	return gaps, fromRelease, failed
}

// trial waits for a steady leader, signals it, measures the gap until
// another process is elected, and replaces the signalled process.
func (g *benchGroup) trial(ctx context.Context, sig syscall.Signal) (gap, fromRelease time.Duration, err error) {
	for len(g.live) < g.contenders {
		if err := g.start(ctx); err != nil {
			return 0, 0, err
		}
	}
	deadline := time.After(g.timeout)
	for !g.steady() {
		if _, err := g.next(ctx, deadline); err != nil {
			return 0, 0, fmt.Errorf("waiting for a leader all agree on: %w", err)
		}
	}
	if g.phaseMax > 0 {
		phase := time.After(time.Duration(g.rng.Int64N(int64(g.phaseMax))))
	wait:
		for {
			select {
			case pe := <-g.events:
				g.handle(pe)
			case <-phase:
				break wait
			case <-ctx.Done():
				return 0, 0, ctx.Err()
			}
		}
		if !g.steady() {
			return 0, 0, errors.New("leadership changed before the signal")
		}
	}
	old := g.leader
	t0 := lease.MonotonicNow()
	if err := old.cmd.Process.Signal(sig); err != nil {
		return 0, 0, err
	}
	// Each process's events come through a pipe of its own, so the new
	// leader's "elected" may be read before the "released" the old one
	// wrote earlier: after SIGTERM, read on until both are in (or the old
	// leader's output has ended).
	var released, elected int64
	oldDone := false
	deadline = time.After(g.timeout)
	for elected == 0 || (sig == syscall.SIGTERM && released == 0 && !oldDone) {
		pe, err := g.next(ctx, deadline)
		if err != nil {
			return 0, 0, fmt.Errorf("waiting for a new leader: %w", err)
		}
		switch {
		case pe.p == old && pe.eof:
			oldDone = true
		case pe.p == old && pe.ev.Event == lease.EventReleased:
			released = pe.ev.MonoNS
		case pe.p != old && pe.ev.Event == lease.EventElected && elected == 0:
			elected = pe.ev.MonoNS
		}
	}
	gap = time.Duration(elected - t0)
	if released != 0 {
		fromRelease = time.Duration(elected - released)
	}
	// Reap the old leader (a SIGTERMed one exits by itself) and forget it
	// now, so that the next trial starts its replacement.
	select {
	case <-old.exited:
	case <-time.After(10 * time.Second):
		old.cmd.Process.Kill()
		<-old.exited
	}
	g.handle(procEvent{p: old, eof: true})
	return gap, fromRelease, nil
}

// stopAll kills every live process and waits for them.
func (g *benchGroup) stopAll() {
	for _, p := range g.live {
		p.cmd.Process.Kill()
	}
	for _, p := range g.live {
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
		}
	}
}

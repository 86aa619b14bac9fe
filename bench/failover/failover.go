package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"coord/bench"
)

// ErrInvalid means a Config is not usable; the message names the field.
var ErrInvalid = errors.New("failover: invalid configuration")

// Timings are the articles' lease program's intervals.
type Timings struct{ Lease, Renew, Watch time.Duration }

// ArticlesTimings are the articles' own: a 9 s lease renewed every 3 s,
// watchers checking every 3 s.
var ArticlesTimings = Timings{Lease: 9 * time.Second, Renew: 3 * time.Second, Watch: 3 * time.Second}

// Config configures Run. Start from DefaultConfig.
type Config struct {
	// Binary is the coord binary the contenders run.
	Binary string
	// Dir holds the lock files; it must exist.
	Dir string
	// Store is coord's lease store URL; "" means a lock file in Dir.
	Store string
	// Name is the lease's name in Store; "" means one of this process.
	Name string
	// Signals are those to measure, each in turn: SIGKILL, SIGTERM.
	Signals []syscall.Signal
	// Trials is the number of trials per signal for coord;
	// BaselineTrials for the articles' program (0 skips it), shared by
	// Parallel groups running at once.
	Trials, BaselineTrials, Parallel int
	// Contenders is the number of processes competing in each group.
	Contenders int
	// TTL is coord's lease TTL.
	TTL time.Duration
	// Baseline are the articles' program's timings (tests shorten them).
	Baseline Timings
	// FreezeOne adds, for the whole run, one more coord contender stopped
	// (SIGSTOP) inside its first compare-and-swap, through the file
	// store's test hook (COORD_FILE_TEST_STOP): the others must elect
	// around a process frozen mid-write. File store only.
	FreezeOne bool
	// Progress, if set, is told what runs and what fails.
	Progress func(format string, args ...any)
}

// DefaultConfig returns the figures' configuration: 100 trials per signal
// of each, 25 articles' groups at once, 3 contenders, coord's TTL as the
// articles' lease (9 s).
func DefaultConfig() Config {
	return Config{
		Signals:        []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM},
		Trials:         100,
		BaselineTrials: 100,
		Parallel:       25,
		Contenders:     3,
		TTL:            9 * time.Second,
		Baseline:       ArticlesTimings,
	}
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	for _, s := range c.Signals {
		if s != syscall.SIGKILL && s != syscall.SIGTERM {
			return fmt.Errorf("%w: signal %v: want SIGKILL or SIGTERM", ErrInvalid, s)
		}
	}
	switch {
	case c.Binary == "" || c.Dir == "":
		return fmt.Errorf("%w: Binary and Dir are required", ErrInvalid)
	case c.Trials < 1:
		return fmt.Errorf("%w: trials %d: want at least 1", ErrInvalid, c.Trials)
	case c.BaselineTrials < 0:
		return fmt.Errorf("%w: baseline trials %d is negative", ErrInvalid, c.BaselineTrials)
	case c.Parallel < 1:
		return fmt.Errorf("%w: parallel %d: want at least 1", ErrInvalid, c.Parallel)
	case c.Contenders < 2:
		return fmt.Errorf("%w: contenders %d: want at least 2", ErrInvalid, c.Contenders)
	case c.Baseline.Lease <= 0 || c.Baseline.Renew <= 0 || c.Baseline.Watch <= 0:
		return fmt.Errorf("%w: the articles' timings must be positive", ErrInvalid)
	case c.TTL <= 0:
		return fmt.Errorf("%w: ttl %v is not positive", ErrInvalid, c.TTL)
	}
	return nil
}

// Stats summarises the gaps of one program and signal.
type Stats struct {
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

// Summarize returns the Stats of gaps, in the order measured, and of the
// gaps measured from the old leader's release.
func Summarize(impl, signal string, gaps, fromRelease []time.Duration, failed int) Stats {
	s := Stats{Impl: impl, Signal: signal, Trials: len(gaps), Failed: failed}
	if len(gaps) > 0 {
		sorted := slices.Clone(gaps)
		slices.Sort(sorted)
		s.MinMS, s.MedianMS = bench.Milliseconds(sorted[0]), bench.Milliseconds(bench.Percentile(sorted, 50))
		s.P99MS, s.MaxMS = bench.Milliseconds(bench.Percentile(sorted, 99)), bench.Milliseconds(sorted[len(sorted)-1])
		for _, g := range gaps {
			s.GapsMS = append(s.GapsMS, bench.Milliseconds(g))
		}
	}
	if len(fromRelease) > 0 {
		sorted := slices.Clone(fromRelease)
		slices.Sort(sorted)
		s.FromReleaseMedianMS = bench.Milliseconds(bench.Percentile(sorted, 50))
	}
	return s
}

// Run measures coord for each signal, then the articles' program (unless
// BaselineTrials is 0). If ctx ends, it returns what it measured so far
// and ctx's error.
func Run(ctx context.Context, cfg Config) ([]Stats, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Progress == nil {
		cfg.Progress = quiet
	}
	store, name := cfg.Lease()
	if cfg.FreezeOne {
		stop, err := startFrozen(cfg.Binary, store, name, cfg.TTL)
		if err != nil {
			return nil, err
		}
		defer stop()
		cfg.Progress("one more contender is stopped inside its compare-and-swap for the whole run")
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var results []Stats
	for _, sig := range cfg.Signals {
		cfg.Progress("coord, %s: %d trials, TTL %v, %d contenders, store %s", sig, cfg.Trials, cfg.TTL, cfg.Contenders, store)
		spawn := func(i int) (*proc, error) {
			id := "c" + strconv.Itoa(i)
			return startProc(cfg.Binary, id, "elect", "--store", store, "--name", name, "--id", id, "--json", "--ttl", cfg.TTL.String())
		}
		g := &group{spawn: spawn, contenders: cfg.Contenders, rng: rng, phaseMax: 50 * time.Millisecond,
			timeout: 3*cfg.TTL + 30*time.Second, progress: cfg.Progress}
		gaps, fromRelease, failed := g.run(ctx, sig, cfg.Trials)
		results = append(results, Summarize("coord", sig.String(), gaps, fromRelease, failed))
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
	}
	if cfg.BaselineTrials == 0 {
		return results, nil
	}
	for _, sig := range cfg.Signals {
		results = append(results, runBaseline(ctx, cfg, sig))
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
	}
	return results, nil
}

func quiet(string, ...any) {}

// Lease returns the store URL and the lease name coord's contenders use:
// Store and Name, or a lock file in Dir, or a name of this process.
func (c Config) Lease() (store, name string) {
	store, name = c.Store, c.Name
	if store == "" {
		return "file://" + filepath.Join(c.Dir, "leader.lock"), "leader.lock"
	}
	if name == "" {
		name = fmt.Sprintf("bench-%d", os.Getpid())
	}
	return store, name
}

// runBaseline measures the articles' lease program: cfg.Parallel groups,
// each on its own lock file, share the trials.
func runBaseline(ctx context.Context, cfg Config, sig syscall.Signal) Stats {
	groups := min(cfg.Parallel, cfg.BaselineTrials)
	tm := cfg.Baseline
	perTrial := tm.Lease + 2*tm.Watch
	cfg.Progress("articles' lease (%v/%v/%v), %s: %d trials in %d parallel groups (about %v)", tm.Lease, tm.Renew, tm.Watch, sig,
		cfg.BaselineTrials, groups, (perTrial * time.Duration((cfg.BaselineTrials+groups-1)/groups)).Round(time.Second))
	var (
		mu                sync.Mutex
		gaps, fromRelease []time.Duration
		failed            int
		wg                sync.WaitGroup
		trialPeriod       = max(tm.Renew, tm.Watch)
	)
	for i := range groups {
		trials := cfg.BaselineTrials / groups
		if i < cfg.BaselineTrials%groups {
			trials++
		}
		lock := filepath.Join(cfg.Dir, fmt.Sprintf("articles-%s-%d.lock", strings.ToLower(sig.String()), i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			spawn := func(int) (*proc, error) {
				return startProc(cfg.Binary, "", "articles", "lease", lock, "--json",
					"--lease", tm.Lease.String(), "--renew", tm.Renew.String(), "--watch", tm.Watch.String())
			}
			seed := uint64(time.Now().UnixNano()) + uint64(i)
			g := &group{spawn: spawn, contenders: cfg.Contenders, rng: rand.New(rand.NewPCG(seed, 11)),
				phaseMax: trialPeriod, staggerMax: trialPeriod, timeout: 3*perTrial + 30*time.Second, progress: quiet}
			gs, fr, fl := g.run(ctx, sig, trials)
			mu.Lock()
			gaps, fromRelease, failed = append(gaps, gs...), append(fromRelease, fr...), failed+fl
			mu.Unlock()
		}()
	}
	wg.Wait()
	return Summarize("articles", sig.String(), gaps, fromRelease, failed)
}

// Target is a bound on coord's p99 gap after one signal.
type Target struct {
	Signal  string  `json:"signal"` // syscall.Signal.String()
	P99MSLT float64 `json:"p99_ms_below"`
}

// TargetResult is a Target and what was measured against it.
type TargetResult struct {
	Target
	P99MS float64 `json:"p99_ms"`
	Met   bool    `json:"met"`
}

// Targets returns coord's targets for a store URL ("" is Run's default,
// a lock file): a p99 gap under 50 ms after SIGKILL and under 10 ms after
// SIGTERM, for the file store only. The others learn of a SIGKILLed
// holder at its expiry, so that the gap is the TTL by design, and their
// release reaches the candidates through a server (or, for SQLite, a
// poll): no target applies to them, and none is reported.
func Targets(store string) []Target {
	if store != "" && !strings.HasPrefix(store, "file://") {
		return nil
	}
	return []Target{{Signal: syscall.SIGKILL.String(), P99MSLT: 50}, {Signal: syscall.SIGTERM.String(), P99MSLT: 10}}
}

// CheckTargets compares coord's results with the targets of its store,
// in the targets' order; signals not measured are left out.
func CheckTargets(store string, results []Stats) []TargetResult {
	var out []TargetResult
	for _, t := range Targets(store) {
		for _, r := range results {
			if r.Impl == "coord" && r.Signal == t.Signal && r.Trials > 0 {
				out = append(out, TargetResult{Target: t, P99MS: r.P99MS, Met: r.P99MS < t.P99MSLT})
			}
		}
	}
	return out
}

// WriteText prints results as a table, the articles' median over coord's
// for each signal, and whether coord met the targets that apply to its
// store (Targets).
func WriteText(w io.Writer, cfg Config, results []Stats) {
	articles := ""
	if cfg.BaselineTrials > 0 {
		articles = fmt.Sprintf("; articles %v/%v/%v", cfg.Baseline.Lease, cfg.Baseline.Renew, cfg.Baseline.Watch)
	}
	fmt.Fprintf(w, "Leaderless gap after the leader is signalled (%d contenders; coord TTL %v%s)\n", cfg.Contenders, cfg.TTL, articles)
	fmt.Fprintf(w, "machine: %s\n\n", bench.Machine())
	fmt.Fprintf(w, "%-9s %-8s %7s %10s %10s %10s %10s\n", "impl", "signal", "trials", "min", "median", "p99", "max")
	median := map[string]float64{}
	for _, r := range results {
		fmt.Fprintf(w, "%-9s %-8s %7d %10s %10s %10s %10s", r.Impl, shortSignal(r.Signal), r.Trials,
			bench.FormatMS(r.MinMS), bench.FormatMS(r.MedianMS), bench.FormatMS(r.P99MS), bench.FormatMS(r.MaxMS))
		if r.Failed > 0 {
			fmt.Fprintf(w, "  (%d trials failed)", r.Failed)
		}
		if r.FromReleaseMedianMS > 0 {
			fmt.Fprintf(w, "  (median from release: %s)", bench.FormatMS(r.FromReleaseMedianMS))
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
	checked := CheckTargets(cfg.Store, results)
	for _, t := range checked {
		if t.Met {
			fmt.Fprintf(w, "%s: target met: p99 %s, below %.0fms\n", shortSignal(t.Signal), bench.FormatMS(t.P99MS), t.P99MSLT)
		} else {
			fmt.Fprintf(w, "%s: target missed: p99 %s, not below %.0fms\n", shortSignal(t.Signal), bench.FormatMS(t.P99MS), t.P99MSLT)
		}
	}
	if len(Targets(cfg.Store)) == 0 {
		fmt.Fprintln(w, "no target applies to this store: after SIGKILL its gap is the TTL by design (the targets are the file store's)")
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

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"coord/bench"
	"coord/lease"
)

func init() { registerBench(newBenchLatencyCmd) }

// pinger is implemented by backends that can make one plain round trip to
// their store (a GET, a SELECT 1): the reference beside which the lease
// operations are reported.
type pinger interface {
	Ping(ctx context.Context) error
}

// latencyFlags configure coord bench latency.
type latencyFlags struct {
	stores     []string
	iterations int
	ttl        time.Duration
	jsonOut    bool
}

func newBenchLatencyCmd() *cobra.Command {
	var f latencyFlags
	cmd := &cobra.Command{
		Use:   "latency",
		Short: "Acquire, renew and release latency of every lease store, beside its plain round trip",
		Long: `Measure, for each --store in one run, how long Acquire, Renew and Release take
(median and p99 over --iterations), beside the store's own plain round trip
(a GET for Redis, SELECT 1 for PostgreSQL and SQLite, a Get for etcd, an
exists for ZooKeeper): what the lease costs above talking to the store at
all.

Each iteration acquires a lease name of its own, renews it, releases it and
pings the store, so that the four operations see the same conditions. The
machine is shared and noisy: compare stores within one run, not across runs.
Without --store, it measures an SQLite file and a lock file in a temporary
directory.`,
		Example: `  coord bench latency
  coord bench latency --store sqlite:///tmp/leases.db --store redis://127.0.0.1:6379/0 \
    --store postgres://postgres@127.0.0.1:5432/postgres --store etcd://127.0.0.1:2379 \
    --store zk://127.0.0.1:2181`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLatencyBench(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f)
		},
	}
	fl := cmd.Flags()
	// A string array, not a slice: etcd URLs contain commas.
	fl.StringArrayVar(&f.stores, "store", nil, "lease store URL (repeat for several)")
	fl.IntVar(&f.iterations, "iterations", 500, "iterations per store")
	fl.DurationVar(&f.ttl, "ttl", 10*time.Second, "lease TTL (whole seconds suit every store)")
	fl.BoolVar(&f.jsonOut, "json", false, "print the results as JSON")
	return cmd
}

// latencyStats summarises one operation on one store.
type latencyStats struct {
	Store    string  `json:"store"`
	Op       string  `json:"op"`
	N        int     `json:"n"`
	Errors   int     `json:"errors"`
	MedianUS float64 `json:"median_us"`
	P99US    float64 `json:"p99_us"`
}

// latencyOps are the operations measured, in the order reported; "ping" is
// the store's plain round trip.
var latencyOps = []string{"acquire", "renew", "release", "ping"}

func runLatencyBench(ctx context.Context, stdout, stderr io.Writer, f latencyFlags) error {
	if f.iterations < 1 {
		return usagef("--iterations %d: want at least 1", f.iterations)
	}
	if f.ttl <= 0 {
		return usagef("--ttl %v is not positive", f.ttl)
	}
	stores := f.stores
	if len(stores) == 0 {
		dir, err := os.MkdirTemp("", "coord-bench-latency-*")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		stores = []string{"sqlite://" + filepath.Join(dir, "leases.db"), "file://" + filepath.Join(dir, "leader.lock")}
	}
	backends := make([]lease.Backend, len(stores))
	defer func() {
		for _, b := range backends {
			if b != nil {
				b.Close()
			}
		}
	}()
	for i, store := range stores {
		b, err := lease.Open(ctx, store)
		if errors.Is(err, lease.ErrInvalid) {
			return &usageError{err: fmt.Errorf("--store: %w", err)}
		}
		if err != nil {
			return fmt.Errorf("--store %s: %w", redact(store), err)
		}
		backends[i] = b
	}
	var results []latencyStats
	for i, b := range backends {
		fmt.Fprintf(stderr, "bench: %s: %d iterations\n", redact(stores[i]), f.iterations)
		stats, err := measureLatency(ctx, b, stores[i], f)
		if err != nil {
			return err
		}
		results = append(results, stats...)
	}
	if f.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	printLatency(stdout, f, results)
	return nil
}

// measureLatency runs the iterations on one store. A failed operation is
// counted, not timed; a store that fails more than half the time is an
// error.
func measureLatency(ctx context.Context, b lease.Backend, store string, f latencyFlags) ([]latencyStats, error) {
	samples := map[string][]time.Duration{}
	failures := map[string]int{}
	timed := func(op string, call func(context.Context) error) bool {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		err := call(octx)
		if err != nil {
			failures[op]++
			return false
		}
		samples[op] = append(samples[op], time.Since(start))
		return true
	}
	_, canPing := b.(pinger)
	holder := fmt.Sprintf("bench-%d", os.Getpid())
	const warmup = 10
	for i := -warmup; i < f.iterations; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("bench-latency-%d-%d", os.Getpid(), i+warmup)
		var rec lease.Record
		ok := timed("acquire", func(ctx context.Context) (err error) {
			rec, err = b.Acquire(ctx, name, holder, f.ttl)
			return err
		})
		if ok {
			timed("renew", func(ctx context.Context) error {
				_, err := b.Renew(ctx, name, holder, rec.Token, f.ttl)
				return err
			})
			timed("release", func(ctx context.Context) error { return b.Release(ctx, name, holder, rec.Token) })
		}
		if canPing {
			timed("ping", func(ctx context.Context) error { return b.(pinger).Ping(ctx) })
		}
		if i == -1 { // the warm-up's samples are dropped
			clear(samples)
			clear(failures)
		}
	}
	if failures["acquire"] > f.iterations/2 {
		return nil, fmt.Errorf("--store %s: %d of %d acquisitions failed", redact(store), failures["acquire"], f.iterations)
	}
	var out []latencyStats
	for _, op := range latencyOps {
		s := latencyStats{Store: redact(store), Op: op, N: len(samples[op]), Errors: failures[op]}
		if s.N == 0 && s.Errors == 0 {
			continue // a store without Ping
		}
		if s.N > 0 {
			sorted := slices.Clone(samples[op])
			slices.Sort(sorted)
			s.MedianUS = float64(bench.Percentile(sorted, 50).Nanoseconds()) / 1000
			s.P99US = float64(bench.Percentile(sorted, 99).Nanoseconds()) / 1000
		}
		out = append(out, s)
	}
	return out, nil
}

func printLatency(w io.Writer, f latencyFlags, results []latencyStats) {
	fmt.Fprintf(w, "Lease operation latency, %d iterations per store, TTL %v\n", f.iterations, f.ttl)
	fmt.Fprintf(w, "machine: %s\n\n", bench.Machine())
	fmt.Fprintf(w, "%-8s %-8s %10s %10s %10s  %s\n", "store", "op", "median", "p99", "÷ping", "url")
	pingMedian := map[string]float64{}
	for _, r := range results {
		if r.Op == "ping" {
			pingMedian[r.Store] = r.MedianUS
		}
	}
	for _, r := range results {
		ratio := "-"
		if p := pingMedian[r.Store]; p > 0 && r.Op != "ping" && r.N > 0 {
			ratio = fmt.Sprintf("%.1fx", r.MedianUS/p)
		}
		scheme := r.Store
		if u, err := url.Parse(r.Store); err == nil {
			scheme = u.Scheme
		}
		fmt.Fprintf(w, "%-8s %-8s %10s %10s %10s  %s", scheme, r.Op, fmtUS(r.MedianUS), fmtUS(r.P99US), ratio, r.Store)
		if r.Errors > 0 {
			fmt.Fprintf(w, "  (%d failed)", r.Errors)
		}
		fmt.Fprintln(w)
	}
}

// fmtUS formats microseconds for a table: µs below a millisecond.
func fmtUS(us float64) string {
	if us < 1000 {
		return fmt.Sprintf("%.0fµs", us)
	}
	return fmt.Sprintf("%.2fms", us/1000)
}

// redact hides a store URL's password.
func redact(store string) string {
	u, err := url.Parse(store)
	if err != nil {
		return store
	}
	return u.Redacted()
}

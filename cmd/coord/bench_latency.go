package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"coord/bench"
	"coord/bench/latency"
	"coord/lease"
)

func init() { registerBench(newBenchLatencyCmd) }

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
	fl.StringArrayVar(&f.stores, "store", nil, "lease store URL (repeat for several; default $"+envStore+", else an SQLite file and a lock file)")
	fl.IntVar(&f.iterations, "iterations", 500, "iterations per store")
	fl.DurationVar(&f.ttl, "ttl", 10*time.Second, "lease TTL (whole seconds suit every store)")
	addJSONFlag(cmd, &f.jsonOut, "print one JSON object: the machine, the settings and a result per store and operation")
	return cmd
}

// latencyReport is coord bench latency --json: one object.
type latencyReport struct {
	Machine    string          `json:"machine"`
	Iterations int             `json:"iterations"`
	TTL        string          `json:"ttl"`
	Results    []latency.Stats `json:"results"`
}

func runLatencyBench(ctx context.Context, stdout, stderr io.Writer, f latencyFlags) error {
	if f.iterations < 1 {
		return usagef("--iterations %d: want at least 1", f.iterations)
	}
	if err := ttlBounds.check(f.ttl); err != nil {
		return err
	}
	stores := f.stores
	if len(stores) == 0 && os.Getenv(envStore) != "" {
		stores = []string{os.Getenv(envStore)}
	}
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
			return fmt.Errorf("--store %s: %w", latency.Redact(store), err)
		}
		backends[i] = b
	}
	var results []latency.Stats
	for i, b := range backends {
		fmt.Fprintf(stderr, "bench: %s: %d iterations\n", latency.Redact(stores[i]), f.iterations)
		stats, err := latency.Measure(ctx, b, stores[i], f.iterations, f.ttl)
		if err != nil {
			return err
		}
		results = append(results, stats...)
	}
	if f.jsonOut {
		return writeJSON(stdout, latencyReport{Machine: bench.Machine(), Iterations: f.iterations, TTL: f.ttl.String(), Results: results})
	}
	latency.WriteText(stdout, f.iterations, f.ttl, results)
	return nil
}

package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"coord/bench/watches"
)

func init() { registerBench(newBenchWatchesCmd) }

// watchesFlags configure coord bench watches.
type watchesFlags struct {
	watches      int
	nodes        int
	maxWatches   int
	maxConns     int
	after        []time.Duration
	serverBinary string
	jsonOut      bool
}

func newBenchWatchesCmd() *cobra.Command {
	var f watchesFlags
	cmd := &cobra.Command{
		Use:   "watches [--watches 10000] [--max-watches N]",
		Short: "Resident memory of a cluster node before, during and after a burst of long-poll watches",
		Long: `Start a local cluster of real coord server processes, then open --watches
long-poll watches of one key on the leader at once (each on its own
connection, as separate clients would), and report the leader's resident
memory (VmRSS):

  - before: the idle node;
  - during: once every watch has been answered 503 (beyond --http-max-watches)
    or is waiting, and the node's memory has stopped growing;
  - after: at each of --after once a write to the key has ended them all and
    the clients have closed their connections.

The nodes serve plain HTTP (--insecure), so that a build from before TLS
existed can be measured beside this one with the same requests.
--max-watches and --max-connections are passed to the nodes as
--http-max-watches and --http-max-connections (0: their defaults).
The process running this command holds one connection per watch: it needs a
file descriptor limit above --watches.`,
		Example: `  coord bench watches --watches 10000 --max-watches 10000 --max-connections 10100
  coord bench watches --watches 10000            # the default cap: most are refused`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWatchesBench(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.watches, "watches", 10000, "long-poll watches to open at once")
	fl.IntVar(&f.nodes, "nodes", 3, "number of nodes")
	fl.IntVar(&f.maxWatches, "max-watches", 0, "--http-max-watches of the nodes (0: their default)")
	fl.IntVar(&f.maxConns, "max-connections", 0, "--http-max-connections of the nodes (0: their default)")
	fl.DurationSliceVar(&f.after, "after", []time.Duration{time.Second, 5 * time.Second, 30 * time.Second}, "times after the watches end at which to read the memory")
	fl.BoolVar(&f.jsonOut, "json", false, "print the figures as JSON")
	fl.StringVar(&f.serverBinary, "server-binary", "", "coord binary to run the nodes with (default: this one), to compare builds")
	_ = fl.MarkHidden("server-binary")
	return cmd
}

// runWatchesBench runs coord bench watches (bench/watches) and prints its
// figures.
func runWatchesBench(ctx context.Context, out io.Writer, f watchesFlags) error {
	dir, err := os.MkdirTemp("", "coord-bench-watches-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := watches.Config{Watches: f.watches, Nodes: f.nodes, Dir: dir, Binary: f.serverBinary,
		MaxWatches: f.maxWatches, MaxConnections: f.maxConns, After: f.after}
	if cfg.Binary == "" {
		if cfg.Binary, err = os.Executable(); err != nil {
			return err
		}
	}
	if err := cfg.Validate(); err != nil {
		return &usageError{err: err}
	}
	res, err := watches.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if f.jsonOut {
		return json.NewEncoder(out).Encode(res)
	}
	return res.WriteText(out, cfg)
}

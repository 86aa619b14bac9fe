package main

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"time"

	"coord/server/localcluster"

	"github.com/spf13/cobra"
)

// newClusterBenchFailoverCmd measures failover on real processes: the
// leader killed, the leader stopped, and a run of network faults.
func newClusterBenchFailoverCmd() *cobra.Command {
	var (
		cfg     localcluster.FailoverBenchConfig
		jsonOut bool
		keepDir bool
	)
	cmd := &cobra.Command{
		Use:   "failover [--kills 50] [--stops 50] [--faults 0s] [--tick 100ms]",
		Short: "Measure failover: the leader killed (SIGKILL), stopped (SIGTERM), and network faults",
		Long: `Start two fresh local clusters of real coord server processes side by side
(fsync on, coord's default timing unless --tick): one with coord's defaults,
where a follower takes its leader's connection closing as a hint that the
leader's process died and a leader stopping hands leadership over first, and
one without either (--peer-close-hint=false --shutdown-handover=0). Then:

  - --kills times on each, alternating: kill -9 the leader at a random moment
    while a client writes in a closed loop, and record the longest time
    between two acknowledged writes around the kill; restart the node;
  - --stops times the same with SIGTERM;
  - with --faults D, run both clusters (their peers now behind fault proxies)
    through the same random faults for D: connection resets between two
    nodes, and silent partitions of one node for 0.1 to 3 s; no process
    dies. It reports the elections and leader changes of each: the hint must
    add none.

With --node-log-level debug --node-log-format json the nodes log an election
trace, and the report adds, for the SIGTERMs, where the time went: the median
time of each step of the hand-over (TimeoutNow, votes, the new leader's first
append, the held write answered, the writer's retry) after the signal.

The figures in docs/BENCHMARKS.md ("Failover when the leader's process dies")
come from this command.`,
		Example: `  coord cluster bench failover --kills 10 --stops 10          # a quick look
  coord cluster bench failover --kills 50 --stops 50 --seed 16 # the figures in docs/BENCHMARKS.md
  coord cluster bench failover --kills 0 --stops 0 --faults 4m # network faults only: the hint adds no leader change
  coord cluster bench failover --json > failover.json
  coord cluster bench failover --kills 0 --stops 10 --node-log-level debug --node-log-format json # where a SIGTERM's time goes`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Binary, err = os.Executable(); err != nil {
				return err
			}
			if cfg.Seed == 0 {
				cfg.Seed = rand.Uint64()
			}
			if cfg.Dir == "" {
				if cfg.Dir, err = os.MkdirTemp("", "coord-failover-"); err != nil {
					return err
				}
				if !keepDir {
					defer os.RemoveAll(cfg.Dir)
				}
			}
			if err := cfg.Validate(); err != nil {
				return &usageError{err: err}
			}
			r, err := localcluster.RunFailoverBench(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				return json.NewEncoder(out).Encode(r)
			}
			return r.WriteText(out)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&cfg.Nodes, "nodes", 3, "number of nodes of each cluster")
	fl.IntVar(&cfg.Kills, "kills", 50, "leader kills (SIGKILL) on each cluster")
	fl.IntVar(&cfg.Stops, "stops", 50, "leader stops (SIGTERM) on each cluster")
	fl.DurationVar(&cfg.Faults, "faults", 0, "length of the fault run (0: none)")
	fl.DurationVar(&cfg.Tick, "tick", 100*time.Millisecond, "Raft tick of every node")
	fl.Uint64Var(&cfg.Seed, "seed", 0, "seed of the faults and the moments of the kills (0: random)")
	fl.BoolVar(&cfg.Insecure, "insecure", false, "run the clusters without TLS and tokens")
	fl.StringVar(&cfg.NodeLogLevel, "node-log-level", "", "every node's --log-level (debug: with --keep, the nodes' logs show when the followers saw the leader's connection close; --json gives each event's moments to line them up with)")
	fl.StringVar(&cfg.NodeLogFormat, "node-log-format", "", "every node's --log-format (json, with --node-log-level debug: the report adds where each SIGTERM's time went, step by step, from the nodes' election trace and the writer's attempts)")
	fl.BoolVar(&jsonOut, "json", false, "print the figures as JSON")
	fl.StringVar(&cfg.Dir, "dir", "", "directory for the clusters (default: a temporary one, removed after)")
	fl.BoolVar(&keepDir, "keep", false, "keep the temporary directory (data and logs)")
	return cmd
}

package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newLabCmd is the lab's placeholder until the lab lands: it lists the
// experiments to come and runs none of them.
func newLabCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "lab",
		Short: "Run the experiments of the Coordination series (experiments not built yet)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			fmt.Fprintln(w, "The lab is not built yet. Experiments to come:")
			for _, e := range [][2]string{
				{"race", "threads: 1000 goroutines x 1000 unsynchronised increments"},
				{"mutex", "threads: the same counter behind a mutex"},
				{"granularity", "threads: a lock per increment against a lock per loop"},
				{"semaphore", "threads: a buffered channel as a semaphore of 2"},
				{"prodcons", "threads: producers, consumers and a clean shutdown"},
				{"deadlock", "threads: lock-order inversion"},
				{"exclusive-create", "processes: stat-then-create against O_EXCL"},
				{"failover", "processes: the leaderless gap after kill -9 and SIGTERM"},
				{"empty-file", "processes: a zero-byte lock file"},
				{"takeover-race", "processes: watchers racing for an expired lease"},
				{"paused-leader", "processes: a leader stopped past its TTL"},
			} {
				fmt.Fprintf(w, "  %-17s %s\n", e[0], e[1])
			}
			return nil
		},
	}
}

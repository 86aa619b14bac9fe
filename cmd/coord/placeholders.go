package main

import "github.com/spf13/cobra"

// The groups below are filled in by their own files as they land; until then
// each says in one line that it is not built and exits 1.

func newBenchCmd() *cobra.Command {
	return notBuilt("bench", "Measure leases and the cluster side by side", "issue 3")
}

func newElectCmd() *cobra.Command {
	return notBuilt("elect", "Take part in a leader election over a lease store", "issue 3")
}

func newRunCmd() *cobra.Command {
	return notBuilt("run", "Run a command only while holding a lease", "issue 3")
}

func newServerCmd() *cobra.Command {
	return notBuilt("server", "Run one node of a coord Raft cluster", "issue 6")
}

func newClusterCmd() *cobra.Command {
	return notBuilt("cluster", "Start and manage a local coord cluster", "issue 6")
}

func newSimCmd() *cobra.Command {
	return notBuilt("sim", "Run the deterministic Raft cluster simulator", "issue 5")
}

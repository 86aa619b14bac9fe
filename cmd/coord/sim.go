package main

import "github.com/spf13/cobra"

// newSimCmd is a placeholder until issue 5 lands: it says so and exits 1.
func newSimCmd() *cobra.Command {
	return notBuilt("sim", "Run the deterministic Raft cluster simulator", "issue 5")
}

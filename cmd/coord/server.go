package main

import "github.com/spf13/cobra"

// newServerCmd is a placeholder until issue 6 lands: it says so and exits 1.
func newServerCmd() *cobra.Command {
	return notBuilt("server", "Run one node of a coord Raft cluster", "issue 6")
}

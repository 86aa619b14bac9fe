package main

import "github.com/spf13/cobra"

// newClusterCmd is a placeholder until issue 6 lands: it says so and exits 1.
func newClusterCmd() *cobra.Command {
	return notBuilt("cluster", "Start and manage a local coord cluster", "issue 6")
}

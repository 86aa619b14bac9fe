package main

import "github.com/spf13/cobra"

// newBenchCmd is a placeholder until issue 3 lands: it says so and exits 1.
func newBenchCmd() *cobra.Command {
	return notBuilt("bench", "Measure leases and the cluster side by side", "issue 3")
}

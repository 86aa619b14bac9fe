package main

import "github.com/spf13/cobra"

// newElectCmd is a placeholder until issue 3 lands: it says so and exits 1.
func newElectCmd() *cobra.Command {
	return notBuilt("elect", "Take part in a leader election over a lease store", "issue 3")
}

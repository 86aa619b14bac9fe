package main

import "github.com/spf13/cobra"

// newRunCmd is a placeholder until issue 3 lands: it says so and exits 1.
func newRunCmd() *cobra.Command {
	return notBuilt("run", "Run a command only while holding a lease", "issue 3")
}

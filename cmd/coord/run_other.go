//go:build !linux

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// errRunNeedsLinux is what coord run and its shim report where they cannot
// contain a job.
var errRunNeedsLinux = errors.New("coord run needs Linux: it contains the job in a PID namespace " +
	"(or under a subreaper) so that nothing it started outlives the lease; this platform has neither")

// newRunCmd stands in for coord run on platforms other than Linux: it
// accepts any arguments and reports why it cannot run them.
func newRunCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "run --store URL [flags] -- CMD [ARGS...]",
		Short:              "Run a command only while holding a lease (Linux only)",
		DisableFlagParsing: true,
		RunE:               func(*cobra.Command, []string) error { return errRunNeedsLinux },
	}
}

// newRunInitCmd stands in for coord run's hidden shim.
func newRunInitCmd() *cobra.Command {
	return &cobra.Command{
		Use:                shimCommand,
		Hidden:             true,
		DisableFlagParsing: true,
		RunE:               func(*cobra.Command, []string) error { return errRunNeedsLinux },
	}
}

// shimCommand is the hidden command name coord run re-executes itself as.
const shimCommand = "run-init"

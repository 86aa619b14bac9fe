package main

import (
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
)

// globalFlags are the flags every subcommand accepts.
type globalFlags struct {
	logFormat string
	logLevel  string
}

// newRootCmd builds the whole command tree. stdout and stderr are injected so
// tests can capture them.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	var g globalFlags
	root := &cobra.Command{
		Use:   "coord",
		Short: "Leader election and coordination you can measure",
		Long: `coord measures coordination from threads in one process, to processes on
one machine, to machines on a network: a lab that reproduces every experiment
of the Coordination series beside coord's fixes, leases with fencing tokens over
swappable stores, and a Raft cluster.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := newLogger(stderr, g.logFormat, g.logLevel)
			if err != nil {
				return err
			}
			slog.SetDefault(logger)
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: err} })
	pf := root.PersistentFlags()
	pf.StringVar(&g.logFormat, "log-format", "text", "log format on stderr: text or json")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")

	root.AddGroup(
		&cobra.Group{ID: "lab", Title: "Experiments:"},
		&cobra.Group{ID: "lease", Title: "Leases and leader election:"},
		&cobra.Group{ID: "raft", Title: "Raft cluster:"},
	)
	for _, c := range []struct {
		group string
		cmd   *cobra.Command
	}{
		{"lab", newLabCmd()},
		{"lab", newBenchCmd()},
		{"lease", newElectCmd()},
		{"lease", newRunCmd()},
		{"lease", newWatchCmd()},
		{"raft", newServerCmd()},
		{"raft", newClusterCmd()},
		{"raft", newAuthCmd()},
		{"raft", newSimCmd()},
	} {
		c.cmd.GroupID = c.group
		root.AddCommand(c.cmd)
	}
	root.AddCommand(newVersionCmd())
	root.AddCommand(newArticlesCmd()) // hidden: the articles' original programs
	root.AddCommand(newRunInitCmd())  // hidden: coord run's job shim
	return root
}

// newLogger returns a slog logger writing to w in the given format and level.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, usagef("--log-format %q: want text or json", format)
	}
}

// usageArgs wraps a cobra argument validator so that its errors exit 2.
func usageArgs(validate cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := validate(cmd, args); err != nil {
			return &usageError{err: err}
		}
		return nil
	}
}

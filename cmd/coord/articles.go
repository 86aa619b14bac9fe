package main

import (
	"context"
	"os"
	"strconv"
	"time"

	"coord/lab/articles"
	"coord/lease/eventlog"

	"github.com/spf13/cobra"
)

// newArticlesCmd runs the articles' original Part 2 programs as processes,
// bugs included, for the lab and the benchmarks. It is hidden: nobody should
// use these to coordinate anything.
func newArticlesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:    "articles",
		Short:  "Run the articles' original lock file programs (bugs included)",
		Hidden: true,
		Long: `Run the Coordination articles' Part 2 programs, re-implemented faithfully,
bugs included (see lab/articles). With --json, stdout carries one JSON event
per line in coord elect's format and the articles' lines go to stderr.`,
	}
	var (
		jsonOut bool
		at      string
		hold    time.Duration
	)
	output := func(cmd *cobra.Command) articles.Output {
		if jsonOut {
			return articles.Output{Lines: cmd.ErrOrStderr(), Events: eventlog.NewWriter(cmd.OutOrStdout(), strconv.Itoa(os.Getpid()))}
		}
		return articles.Output{Lines: cmd.OutOrStdout()}
	}
	oneShot := func(use, short string, run func(context.Context, articles.OneShotConfig) (bool, error)) *cobra.Command {
		c := &cobra.Command{
			Use:   use + " PATH",
			Short: short,
			Args:  usageArgs(cobra.ExactArgs(1)),
			RunE: func(cmd *cobra.Command, args []string) error {
				cfg := articles.OneShotConfig{Path: args[0], Hold: hold, Out: output(cmd)}
				if at != "" {
					t, err := time.Parse(time.RFC3339Nano, at)
					if err != nil {
						return usagef("--at %q: want RFC 3339 time, e.g. %s", at, time.Now().Format(time.RFC3339Nano))
					}
					cfg.At = t
				}
				_, err := run(cmd.Context(), cfg)
				return err
			},
		}
		c.Flags().StringVar(&at, "at", "", "look at the lock file at this instant (RFC 3339 with nanoseconds)")
		c.Flags().DurationVar(&hold, "hold", 0, "stay alive this long after deciding")
		c.Flags().BoolVar(&jsonOut, "json", false, "JSON events on stdout, the articles' lines on stderr")
		return c
	}
	cmd.AddCommand(
		oneShot("stat-create", "stat, then create: two leaders now and then", articles.StatCreate),
		oneShot("exclusive", "O_CREATE|O_EXCL: one leader, and a lock that outlives it", articles.Exclusive),
		newArticlesLeaseCmd(&jsonOut, output),
	)
	return cmd
}

func newArticlesLeaseCmd(jsonOut *bool, output func(*cobra.Command) articles.Output) *cobra.Command {
	var cfg articles.LeaseConfig
	c := &cobra.Command{
		Use:   "lease PATH",
		Short: "the articles' lease program (9 s lease, 3 s renew, 3 s watch), until SIGTERM",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, d := range []struct {
				flag string
				v    time.Duration
			}{{"--lease", cfg.LeaseDuration}, {"--renew", cfg.RenewInterval}, {"--watch", cfg.WatchInterval}} {
				if d.v <= 0 {
					return usagef("%s %v is not positive", d.flag, d.v)
				}
			}
			cfg.Path = args[0]
			cfg.Out = output(cmd)
			return articles.Lease(cmd.Context(), cfg)
		},
	}
	c.Flags().DurationVar(&cfg.LeaseDuration, "lease", articles.LeaseDuration, "LEASE_DURATION")
	c.Flags().DurationVar(&cfg.RenewInterval, "renew", articles.RenewInterval, "RENEW_INTERVAL")
	c.Flags().DurationVar(&cfg.WatchInterval, "watch", articles.WatchInterval, "WATCH_INTERVAL")
	c.Flags().BoolVar(jsonOut, "json", false, "JSON events on stdout, the articles' lines on stderr")
	return c
}

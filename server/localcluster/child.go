package localcluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"coord/server"

	"github.com/spf13/pflag"
)

// childEnv marks a process started by a Cluster with Config.SelfServe.
const childEnv = "COORD_LOCALCLUSTER_SERVER"

// ServeIfChild makes a test binary serve as a `coord server` node when a
// Cluster with SelfServe started it: call it first thing in TestMain. In
// any other process it returns at once.
func ServeIfChild() {
	if os.Getenv(childEnv) != "1" {
		return
	}
	os.Exit(runServer(os.Args[1:], os.Stdout, os.Stderr))
}

// runServer runs `server FLAGS...` as the coord command would.
func runServer(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "server" {
		fmt.Fprintf(stderr, "localcluster child: want \"server\" and its flags, got %q\n", args)
		return 2
	}
	var o server.Options
	fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
	o.Register(fs)
	if err := fs.Parse(args[1:]); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	cfg, err := o.Config()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err = server.Serve(ctx, cfg, o.HTTP, func(peer, http string) {
		fmt.Fprintf(stdout, "node %d: raft %s, http %s\n", cfg.ID, peer, http)
	})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

package main

import (
	"errors"
	"fmt"
	"log/slog"

	"coord/server"

	"github.com/spf13/cobra"
)

// newServerCmd runs one node of a coord cluster.
func newServerCmd() *cobra.Command {
	var o server.Options
	cmd := &cobra.Command{
		Use:   "server --id N --peers 1=ADDR,2=ADDR,3=ADDR --data DIR [--http ADDR] (TLS FLAGS | --insecure)",
		Short: "Run one node of a coord Raft cluster",
		Long: `Run one node of a coord Raft cluster: the Raft core, its write-ahead log in
--data, the TCP transport on this node's address in --peers (or --listen),
and the HTTP/JSON API on --http (docs/API.md), with Prometheus metrics at
/metrics, a live page of the cluster at /ui/, probes at /healthz and
/readyz, and with --pprof the Go profiler at /debug/pprof/ (docs/ui.md). A
node restarts from its data directory. Any node accepts any
request: it forwards writes to the leader, and serves linearizable reads
itself after asking the leader for a read index (ReadIndex).

Start every initial node with the same --peers; a node added later with
'coord cluster add' starts with --join.

The data directory records whose it is on the first start (--cluster-id, or
one derived from --peers; the node id). A node refuses a directory that is
another node's or cluster's, or that lost its log, vote file or identity, and
says how to replace it (docs/storage.md). A full disk does not stop it: writes
are answered 507 disk_full until space returns, then it resumes by itself.
On SIGTERM or SIGINT a leader first hands leadership to its most up-to-date
follower (--shutdown-handover bounds the wait), so that the cluster has a
leader again within a round trip or two rather than an election timeout.

A node is secure unless told --insecure, and refuses to start without its
TLS files: peers speak mutual TLS 1.3, each certificate naming its node as
coord://CLUSTER/node/ID (--peer-cert-file, --peer-key-file,
--peer-trusted-ca-file); the API is HTTPS (--cert-file, --key-file,
optionally --trusted-ca-file and --client-cert-auth) and wants a bearer
token on every request but GET /v1/status. The first admin token of a new
cluster comes from --initial-admin-token-file. The node reloads its
certificate files on SIGHUP and when they change. 'coord cluster up' makes
all of these; docs/security.md explains them. --insecure runs without TLS
and tokens: anyone who reaches a port may act as any node or client.

Unless the environment sets GOGC, the Go garbage collector's target follows
the live heap: Go's default (GOGC=100) up to 64 MiB live, 25 from 256 MiB,
64 MiB of room between. A node's heap is mostly its long-lived state: a large
one is collected every quarter of it for little CPU and less resident
memory, a small one no more often than Go's default.`,
		Example: `  coord server --id 1 --peers 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003 \
      --http 127.0.0.1:8001 --data /tmp/coord/1 \
      --peer-cert-file tls/node-1.crt --peer-key-file tls/node-1.key --peer-trusted-ca-file tls/ca.crt \
      --cert-file tls/node-1.crt --key-file tls/node-1.key --initial-admin-token-file tls/admin.token`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.Config()
			if err != nil {
				if errors.Is(err, server.ErrInvalid) {
					return &usageError{err: err}
				}
				return err
			}
			cfg.Logger = slog.Default()
			serverGCOnce.Do(func() { startServerGC() }) // one tuner a process
			return server.Serve(cmd.Context(), cfg, o.HTTP, func(peer, http string) {
				fmt.Fprintf(cmd.OutOrStdout(), "node %d: raft %s, http %s, data %s\n", cfg.ID, peer, http, cfg.DataDir)
			})
		},
	}
	o.Register(cmd.Flags())
	return cmd
}

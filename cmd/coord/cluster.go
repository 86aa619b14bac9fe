package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"coord/api"
	"coord/server/localcluster"

	"github.com/spf13/cobra"
)

// newClusterCmd starts and manages a local cluster of `coord server`
// processes (server/localcluster).
func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Start and manage a local coord cluster",
		Long: `Start a coord Raft cluster of real 'coord server' processes on loopback, see
its state, add and remove nodes, and stop it. The cluster is described in
DIR/cluster.json; every subcommand finds it through --dir.`,
		Example: `  coord cluster up --detach --dir /tmp/c
  eval "$(coord cluster env --dir /tmp/c)"
  coord cluster status
  coord cluster down --dir /tmp/c`,
		Args: usageArgs(cobra.NoArgs),
	}
	cmd.AddCommand(newClusterUpCmd(), newClusterStatusCmd(), newClusterEnvCmd(), newClusterAddCmd(), newClusterRemoveCmd(), newClusterDownCmd(), newClusterBenchCmd())
	return cmd
}

func defaultClusterDir() string { return filepath.Join(os.TempDir(), "coord-cluster") }

func addDirFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "dir", defaultClusterDir(), "the cluster's directory (data, logs, cluster.json)")
}

func newClusterUpCmd() *cobra.Command {
	var (
		nodes    int
		dir      string
		detach   bool
		tick     time.Duration
		insecure bool
		basePort int
		jsonOut  bool
	)
	cmd := &cobra.Command{
		Use:   "up [--nodes 3] [--dir DIR] [--detach] [--base-port PORT] [--insecure] [--json]",
		Short: "Start a local cluster and print how to reach it",
		Long: `Start a cluster of --nodes 'coord server' processes on loopback, wait for a
leader, and print the nodes' addresses and what to try. Without --detach it
runs until interrupted, then stops the nodes; with --detach it leaves them
running ('coord cluster down' stops them). A new cluster gets new
addresses, and old data with new addresses would be a different cluster
that believes it is the old one: so 'up' refuses a --dir where a cluster
is running, removes what a stopped one left there (its node-N data and
logs, its tls directory), and refuses a --dir that holds anything else.

The cluster is secure unless --insecure: 'up' makes a CA, a certificate
per node, a client certificate and an admin token in DIR/tls (files
0600), and the nodes speak mutual TLS to each other and HTTPS with tokens
to clients. 'eval "$(coord cluster env --dir DIR)"' sets the variables
that coord's commands (and curl, given them) use to reach it. --insecure
keeps the old plain mode: no TLS and no tokens, for experiments on
loopback only (docs/security.md).

Ports: chosen free unless --base-port BASE, which fixes them: node N's API
listens on 127.0.0.1:BASE+N and its Raft transport on
127.0.0.1:BASE+100+N (with --base-port 8000: APIs on 8001, 8002, 8003,
Raft on 8101, 8102, 8103). Nodes added later with 'coord cluster add'
follow the same layout. A port in use is an error that names it.

Output: the nodes' table, the endpoints (COORD_ENDPOINTS's value), and
what to try; with --json, one JSON object {"dir", "leader", "secure",
"detached", "endpoints", "nodes": [{"id", "http", "peer", "pid", "log",
"data"}]} once the cluster has a leader.`,
		Example: `  coord cluster up --detach --dir /tmp/c                   # 3 nodes, secure, free ports
  coord cluster up --detach --dir /tmp/c --base-port 8000  # APIs on 127.0.0.1:8001-8003
  coord cluster up --nodes 5 --insecure                    # in the foreground; Ctrl-C stops it`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 1 || nodes > 9 {
				return usagef("--nodes %d: want 1 to 9", nodes)
			}
			if err := positive("--tick", time.Millisecond, 10*time.Second).check(tick); err != nil {
				return err
			}
			if basePort != 0 {
				if _, _, err := localcluster.NodeAddrs(basePort, uint64(nodes)); err != nil || basePort < 1024 {
					return usagef("--base-port %d: want 1024 to %d (node N listens on BASE+N, its Raft transport on BASE+%d+N)",
						basePort, 65535-localcluster.RaftPortOffset-9, localcluster.RaftPortOffset)
				}
			}
			if alive, err := localcluster.Running(dir); err == nil {
				for id, up := range alive {
					if up {
						return fmt.Errorf("a cluster is running in %s (node %d is up): stop it with 'coord cluster down --dir %s'", dir, id, dir)
					}
				}
			}
			if err := localcluster.Clear(dir); err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := localcluster.Start(ctx, localcluster.Config{Nodes: nodes, Dir: dir, Binary: self, Detach: detach,
				Insecure: insecure, BasePort: basePort, Args: []string{"--tick", tick.String()}})
			if err != nil {
				return err
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			leader, err := c.WaitLeader(wctx)
			cancel()
			if err != nil {
				c.Close()
				return err
			}
			if jsonOut {
				err = writeJSON(cmd.OutOrStdout(), clusterUpReport{Dir: dir, Leader: leader, Secure: c.Security() != nil,
					Detached: detach, Endpoints: strings.Join(endpointURLs(c.Security() != nil, c.Endpoints()), ","), Nodes: c.Nodes()})
				if err != nil {
					c.Close()
					return err
				}
			} else {
				printCluster(cmd.OutOrStdout(), c, leader, dir, detach)
			}
			if detach {
				c.Close()
				return nil
			}
			<-ctx.Done()
			if !jsonOut {
				fmt.Fprintln(cmd.OutOrStdout(), "stopping the cluster")
			}
			c.Close()
			_, _ = localcluster.Down(dir) // nodes added with 'cluster add'
			return nil
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", 3, "number of nodes")
	cmd.Flags().BoolVar(&detach, "detach", false, "leave the nodes running and exit")
	cmd.Flags().DurationVar(&tick, "tick", 100*time.Millisecond, "Raft tick of every node")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "no TLS and no tokens: anyone who reaches a port may act as any node or client")
	cmd.Flags().IntVar(&basePort, "base-port", 0, "fix the ports: node N's API on 127.0.0.1:PORT+N, its Raft transport on PORT+100+N (default: free ports)")
	addJSONFlag(cmd, &jsonOut, "print one JSON object describing the cluster once it has a leader")
	addDirFlag(cmd, &dir)
	return cmd
}

// clusterUpReport is coord cluster up --json.
type clusterUpReport struct {
	Dir       string              `json:"dir"`
	Leader    uint64              `json:"leader"`
	Secure    bool                `json:"secure"`
	Detached  bool                `json:"detached"`
	Endpoints string              `json:"endpoints"`
	Nodes     []localcluster.Node `json:"nodes"`
}

// endpointURLs returns the nodes' API URLs, as COORD_ENDPOINTS holds them.
func endpointURLs(secure bool, addrs []string) []string {
	scheme := "https://"
	if !secure {
		scheme = "http://"
	}
	urls := make([]string, len(addrs))
	for i, a := range addrs {
		urls[i] = scheme + a
	}
	return urls
}

func printCluster(w io.Writer, c *localcluster.Cluster, leader uint64, dir string, detach bool) {
	fmt.Fprintf(w, "cluster of %d nodes in %s; leader: node %d\n\n", len(c.IDs()), dir, leader)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NODE\tHTTP\tRAFT\tPID\tLOG")
	for _, n := range c.Nodes() {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\n", n.ID, n.HTTP, n.Peer, n.PID, n.Log)
	}
	tw.Flush()
	eps := c.Endpoints()
	fmt.Fprintf(w, "\nendpoints: %s\n", strings.Join(endpointURLs(c.Security() != nil, eps), ","))
	if c.Security() == nil {
		fmt.Fprintf(w, `
Insecure (--insecure): no TLS, no tokens. Try:
  curl -X PUT --data hello http://%[1]s/v1/kv/greeting
  curl http://%[2]s/v1/kv/greeting
  curl -X POST -d '{"holder":"me","ttl_ms":5000}' http://%[1]s/v1/leases/demo/acquire
  coord elect --store raft://%[3]s --name demo
  coord cluster status --dir %[4]s
  open http://%[1]s/ui/ in a browser: the live page of the cluster
`, eps[0], eps[len(eps)-1], strings.Join(eps, ","), dir)
	} else {
		fmt.Fprintf(w, `
Secure: mutual TLS between nodes, HTTPS and tokens for clients; CA,
certificates and the admin token are in %[5]s. Try:
  eval "$(coord cluster env --dir %[4]s)"
  curl --cacert "$COORD_CACERT" -H "Authorization: Bearer $COORD_TOKEN" -X PUT --data hello https://%[1]s/v1/kv/greeting
  curl --cacert "$COORD_CACERT" -H "Authorization: Bearer $COORD_TOKEN" https://%[2]s/v1/kv/greeting
  coord elect --store raft:// --name demo
  coord auth token create --role read --prefix app/
  coord cluster status
  coord auth token create --role read --name dashboard, then open https://%[1]s/ui/
    in a browser that trusts %[5]s/ca.crt (docs/ui.md): the live page of the cluster
`, eps[0], eps[len(eps)-1], strings.Join(eps, ","), dir, filepath.Join(dir, localcluster.TLSDir))
	}
	if detach {
		fmt.Fprintf(w, "\nThe nodes keep running; stop them with: coord cluster down --dir %s\n", dir)
	} else {
		fmt.Fprintln(w, "\nCtrl-C stops the cluster.")
	}
}

func newClusterStatusCmd() *cobra.Command {
	var (
		access   accessFlags
		watch    bool
		interval time.Duration
		jsonOut  bool
	)
	cmd := &cobra.Command{
		Use:   "status [--dir DIR | --endpoints ADDR,... [--cacert FILE]] [--watch [--interval 1s]] [--json]",
		Short: "Show every node's role, term, leader and indexes",
		Long: `Show every node's role, term, leader and indexes. The nodes are those of
--endpoints, else of $COORD_ENDPOINTS (with $COORD_CACERT, as coord cluster
env sets them), else of the cluster in --dir. Status needs no token.

With --watch it asks again every --interval until interrupted: on a
terminal it redraws the table in place; otherwise it prints a table, with
the time, each time one changes. A node that does not answer shows as down
and the watch goes on. Every coord server also serves a live page at
/ui/ (docs/ui.md).

With --json, one JSON object: {"nodes": [{"endpoint", "status", "error"}]},
where status is the node's GET /v1/status answer (docs/API.md) and error
says why a node did not answer. With --watch --json, JSON Lines: one such
object, with a "time" field, each time one changes. Without --watch the
exit status is 1 if no node answered.`,
		Example: `  coord cluster status --dir /tmp/c
  eval "$(coord cluster env --dir /tmp/c)" && coord cluster status --json
  coord cluster status --dir /tmp/c --watch --interval 2s`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return usagef("--interval %v: want a positive duration", interval)
			}
			eps, acc, err := access.resolve(cmd, os.Getenv)
			if err != nil {
				return err
			}
			if !watch {
				if jsonOut {
					r, answered := statusReportOf(cmd.Context(), eps, acc)
					if err := writeJSON(cmd.OutOrStdout(), r); err != nil {
						return err
					}
					if answered == 0 {
						return errors.New("no node answered")
					}
					return nil
				}
				table, down := statusTable(cmd.Context(), eps, acc)
				fmt.Fprint(cmd.OutOrStdout(), table)
				if down == len(eps) {
					return errors.New("no node answered")
				}
				return nil
			}
			if jsonOut {
				return watchStatusJSON(cmd.Context(), cmd.OutOrStdout(), eps, acc, interval)
			}
			return watchStatus(cmd.Context(), cmd.OutOrStdout(), eps, acc, interval)
		},
	}
	access.register(cmd)
	cmd.Flags().BoolVar(&watch, "watch", false, "ask again every --interval until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between two looks, with --watch")
	addJSONFlag(cmd, &jsonOut, "print one JSON object: every node's status, or why it did not answer (JSON Lines with --watch)")
	return cmd
}

// statusReport is coord cluster status --json.
type statusReport struct {
	Nodes []nodeReport `json:"nodes"`
}

// nodeReport is one endpoint's answer, or why there was none.
type nodeReport struct {
	Endpoint string          `json:"endpoint"`
	Status   *api.NodeStatus `json:"status,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// statusReportOf asks every endpoint for its status and returns the
// report and how many answered.
func statusReportOf(ctx context.Context, eps []string, acc localcluster.Access) (statusReport, int) {
	sts, errs := localcluster.StatusAll(ctx, eps, acc)
	r := statusReport{Nodes: make([]nodeReport, len(eps))}
	answered := 0
	for i, ep := range eps {
		r.Nodes[i].Endpoint = ep
		if errs[i] != nil {
			r.Nodes[i].Error = errs[i].Error()
			continue
		}
		answered++
		r.Nodes[i].Status = &sts[i]
	}
	return r, answered
}

// watchStatusJSON prints, as JSON Lines, the status report each time it
// changes, looking every interval until ctx is done.
func watchStatusJSON(ctx context.Context, w io.Writer, eps []string, acc localcluster.Access, interval time.Duration) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var last []byte
	for {
		lookCtx, cancel := context.WithTimeout(ctx, max(interval, 500*time.Millisecond))
		r, _ := statusReportOf(lookCtx, eps, acc)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		cur, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if !bytes.Equal(cur, last) {
			line := struct {
				Time string `json:"time"`
				statusReport
			}{time.Now().UTC().Format(time.RFC3339), r}
			if err := json.NewEncoder(w).Encode(line); err != nil {
				return err
			}
		}
		last = cur
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// statusTable asks every endpoint for its status and returns the table,
// and how many did not answer.
func statusTable(ctx context.Context, eps []string, acc localcluster.Access) (string, int) {
	sts, errs := localcluster.StatusAll(ctx, eps, acc)
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHTTP\tROLE\tTERM\tLEADER\tCOMMIT\tAPPLIED\tMEMBERS")
	down := 0
	for i, ep := range eps {
		if errs[i] != nil {
			down++
			fmt.Fprintf(tw, "?\t%s\tdown\t\t\t\t\t%v\n", ep, errs[i])
			continue
		}
		st := sts[i]
		var members []string
		for _, m := range st.Members {
			s := fmt.Sprint(m.ID)
			if !m.Voter {
				s += "(learner)"
			}
			members = append(members, s)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", st.ID, ep, st.Role, st.Term, st.Leader, st.Commit, st.Applied, strings.Join(members, ","))
	}
	tw.Flush()
	return b.String(), down
}

// watchStatus prints the status table every interval until ctx is done:
// redrawn in place on a terminal, else printed when it changes.
func watchStatus(ctx context.Context, w io.Writer, eps []string, acc localcluster.Access, interval time.Duration) error {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var last string
	for {
		// Each look gets at most one interval, so a node that hangs
		// cannot stop the refresh.
		lookCtx, cancel := context.WithTimeout(ctx, max(interval, 500*time.Millisecond))
		table, _ := statusTable(lookCtx, eps, acc)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		now := time.Now().Format("15:04:05")
		switch {
		case tty:
			// Home the cursor and clear the screen, then draw.
			fmt.Fprintf(w, "\x1b[H\x1b[2Jcoord cluster status at %s, every %v (Ctrl-C stops)\n\n%s", now, interval, table)
		case table != last:
			fmt.Fprintf(w, "%s\n%s\n", now, table)
		}
		last = table
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

func newClusterEnvCmd() *cobra.Command {
	var (
		dir     string
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "env [--dir DIR] [--json]",
		Short: "Print shell exports to reach the cluster in DIR",
		Long: `Print shell exports for the cluster in --dir: COORD_ENDPOINTS (its nodes'
API URLs, comma-separated), and for a secure cluster COORD_CACERT,
COORD_CERT and COORD_KEY (the CA and the client certificate's files) and
COORD_TOKEN (the admin token itself). Every coord command that talks to a
cluster (cluster status, auth, elect and run with raft://) reads them when
its flags are not given. Use it as

  eval "$(coord cluster env --dir DIR)"

The token is a secret: the output is for the shell, not for a log. With
--json, one JSON object maps each variable to its value (an insecure
cluster has only COORD_ENDPOINTS).`,
		Example: `  eval "$(coord cluster env --dir /tmp/c)"
  coord cluster env --dir /tmp/c --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, err := localcluster.Load(dir)
			if err != nil {
				return err
			}
			if jsonOut {
				vars, err := envVars(info)
				if err != nil {
					return err
				}
				m := map[string]string{}
				for _, kv := range vars {
					m[kv[0]] = kv[1]
				}
				return writeJSON(cmd.OutOrStdout(), m)
			}
			return printEnv(cmd.OutOrStdout(), info)
		},
	}
	addDirFlag(cmd, &dir)
	addJSONFlag(cmd, &jsonOut, "print one JSON object: variable name to value")
	return cmd
}

// printEnv writes the exports of the cluster info describes.
func printEnv(w io.Writer, info localcluster.Info) error {
	vars, err := envVars(info)
	if err != nil {
		return err
	}
	for _, kv := range vars {
		fmt.Fprintf(w, "export %s=%s\n", kv[0], shellQuote(kv[1]))
	}
	if info.Security == nil {
		fmt.Fprintln(w, "unset COORD_CACERT COORD_CERT COORD_KEY COORD_TOKEN")
	}
	return nil
}

// envVars returns the variables, and their values, that reach the cluster
// info describes.
func envVars(info localcluster.Info) ([][2]string, error) {
	var addrs []string
	for _, n := range info.Nodes {
		addrs = append(addrs, n.HTTP)
	}
	vars := [][2]string{{"COORD_ENDPOINTS", strings.Join(endpointURLs(info.Security != nil, addrs), ",")}}
	sec := info.Security
	if sec == nil {
		return vars, nil
	}
	token, err := os.ReadFile(sec.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	return append(vars, [][2]string{{"COORD_CACERT", sec.CA}, {"COORD_CERT", sec.Cert}, {"COORD_KEY", sec.Key},
		{"COORD_TOKEN", strings.TrimSpace(string(token))}}...), nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func newClusterAddCmd() *cobra.Command {
	var (
		dir     string
		id      uint64
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "add --id N [--dir DIR] [--json]",
		Short: "Start a new node and add it to the cluster (as a learner, then a voter)",
		Long: `Start a new 'coord server' with --id N, let it catch up as a learner, then
make it a voter. With --json, one JSON object describes the node
({"id", "http", "peer", "pid", "log", "data", "join"}).`,
		Example: `  coord cluster add --id 4 --dir /tmp/c`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id == 0 {
				return usagef("--id is required (a positive integer)")
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			n, err := localcluster.AddNode(ctx, dir, self, nil, false, id, nil)
			if err != nil {
				return err
			}
			if jsonOut {
				return writeJSON(cmd.OutOrStdout(), n)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %d added: http %s, raft %s, pid %d, log %s\n", n.ID, n.HTTP, n.Peer, n.PID, n.Log)
			return nil
		},
	}
	addDirFlag(cmd, &dir)
	cmd.Flags().Uint64Var(&id, "id", 0, "the new node's ID (required)")
	addJSONFlag(cmd, &jsonOut, "print one JSON object describing the new node")
	return cmd
}

func newClusterRemoveCmd() *cobra.Command {
	var (
		dir     string
		id      uint64
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:     "remove --id N [--dir DIR] [--json]",
		Short:   "Remove a node from the cluster and stop it",
		Long:    `Remove node --id from the cluster's membership, then stop its process. With --json, one JSON object: {"removed": N}.`,
		Example: `  coord cluster remove --id 4 --dir /tmp/c`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id == 0 {
				return usagef("--id is required (a positive integer)")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			if err := localcluster.RemoveNode(ctx, dir, id); err != nil {
				return err
			}
			if jsonOut {
				return writeJSON(cmd.OutOrStdout(), map[string]uint64{"removed": id})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %d removed\n", id)
			return nil
		},
	}
	addDirFlag(cmd, &dir)
	cmd.Flags().Uint64Var(&id, "id", 0, "the node to remove (required)")
	addJSONFlag(cmd, &jsonOut, "print one JSON object naming the removed node")
	return cmd
}

func newClusterDownCmd() *cobra.Command {
	var (
		dir     string
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "down [--dir DIR] [--json]",
		Short: "Stop every node of a cluster started with --detach",
		Long: `Stop every node of the cluster in --dir (SIGTERM, then SIGKILL after 10 s),
keeping its data. With --json, one JSON object: {"stopped": [ids], "dir"}.`,
		Example: `  coord cluster down --dir /tmp/c`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			stopped, err := localcluster.Down(dir)
			if err != nil {
				return err
			}
			if jsonOut {
				return writeJSON(cmd.OutOrStdout(), struct {
					Stopped []uint64 `json:"stopped"`
					Dir     string   `json:"dir"`
				}{append([]uint64{}, stopped...), dir})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stopped %d nodes %v; data kept in %s\n", len(stopped), stopped, dir)
			return nil
		},
	}
	addDirFlag(cmd, &dir)
	addJSONFlag(cmd, &jsonOut, "print one JSON object naming the stopped nodes")
	return cmd
}

func newClusterBenchCmd() *cobra.Command {
	var (
		nodes        int
		dir          string
		concurrency  []int
		duration     time.Duration
		failovers    int
		tick         time.Duration
		jsonOut      bool
		keepDir      bool
		settleFactor int
		insecure     bool
		compare      bool
	)
	cmd := &cobra.Command{
		Use:   "bench [--nodes 3] [--concurrency 1,4,16,64] [--duration 5s] [--failovers 20]",
		Short: "Measure a local cluster: write throughput and latency, failover times",
		Long: `Start a fresh local cluster of real coord server processes (fsync on, coord's
default timing unless --tick), then measure:

  - committed writes per second and their p50/p99 latency, for each client
    concurrency in --concurrency: each client writes 100-byte values in a
    closed loop for --duration, first through the leader (clients that know
    only its address), then through a follower (which forwards each write
    to the leader as a Raft proposal and answers once it applied it),
    each row naming the node that led;
  - beside them, the node package alone at the same concurrency (three
    Raft nodes in this process on the same disk, fsync on, proposals made on
    the leader: no HTTP, TLS, sessions or state machine), and each server
    figure as a share of it;
  - the failover time distribution: the leader killed with SIGKILL
    --failovers times, and the time until the other nodes agree on a new one.

The cluster is secure (mutual TLS, HTTPS, tokens) unless --insecure.
--compare measures the cost of security: it starts a secure and an
insecure cluster side by side and runs each concurrency on both, one after
the other, printing writes/s of each and their ratio (no failovers).
What is being measured is printed on stderr as it starts.

The figures in docs/BENCHMARKS.md come from this command. With --json, one
JSON object with every figure.`,
		Example: `  coord cluster bench
  coord cluster bench --concurrency 1,16 --duration 2s --failovers 5 --json
  coord cluster bench --compare --concurrency 1,4,16,64 --duration 10s`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := localcluster.BenchConfig{Nodes: nodes, Dir: dir, Tick: tick, Concurrency: concurrency, Duration: duration,
				Failovers: failovers, Settle: time.Duration(settleFactor) * tick * 10, Insecure: insecure}
			var err error
			if cfg.Binary, err = os.Executable(); err != nil {
				return err
			}
			if cfg.Dir == "" {
				if cfg.Dir, err = os.MkdirTemp("", "coord-bench-"); err != nil {
					return err
				}
				if !keepDir {
					defer os.RemoveAll(cfg.Dir)
				}
			}
			if err := cfg.Validate(); err != nil {
				return &usageError{err: err}
			}
			out := cmd.OutOrStdout()
			if compare {
				r, err := localcluster.RunCompare(cmd.Context(), cfg)
				if err != nil {
					return err
				}
				if jsonOut {
					return json.NewEncoder(out).Encode(r)
				}
				return r.WriteText(out)
			}
			stderr := cmd.ErrOrStderr()
			cfg.Progress = func(format string, args ...any) { fmt.Fprintf(stderr, "bench: "+format+"\n", args...) }
			r, err := localcluster.RunBench(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if jsonOut {
				return json.NewEncoder(out).Encode(r)
			}
			return r.WriteText(out)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&nodes, "nodes", 3, "number of nodes")
	fl.IntSliceVar(&concurrency, "concurrency", []int{1, 4, 16, 64}, "client concurrencies to measure")
	fl.DurationVar(&duration, "duration", 5*time.Second, "how long each concurrency runs")
	fl.IntVar(&failovers, "failovers", 20, "leader kills to measure (0: none)")
	fl.DurationVar(&tick, "tick", 100*time.Millisecond, "Raft tick of every node")
	addJSONFlag(cmd, &jsonOut, "print one JSON object with every figure")
	fl.StringVar(&dir, "dir", "", "directory for the cluster (default: a temporary one, removed after)")
	fl.BoolVar(&keepDir, "keep", false, "keep the temporary directory (data and logs)")
	fl.IntVar(&settleFactor, "settle", 3, "election timeouts to wait between failovers")
	fl.BoolVar(&insecure, "insecure", false, "measure a cluster without TLS and tokens")
	fl.BoolVar(&compare, "compare", false, "measure a secure and an insecure cluster side by side and print the ratio")
	cmd.AddCommand(newClusterBenchFailoverCmd())
	return cmd
}

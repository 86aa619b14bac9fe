package localcluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"coord/bench"
	"coord/bench/raftnode"
	"coord/client"
)

// BenchRow is the write throughput and latency at one client concurrency.
type BenchRow struct {
	Concurrency int           `json:"concurrency"`
	Ops         int           `json:"ops"`
	Errors      int           `json:"errors"`
	Seconds     float64       `json:"seconds"`
	PerSecond   float64       `json:"per_second"`
	P50         time.Duration `json:"p50_ns"`
	P99         time.Duration `json:"p99_ns"`
	// Node is the node the clients were given (RunBench; 0: any node),
	// and Leader the node that led when they began.
	Node   uint64 `json:"node,omitempty"`
	Leader uint64 `json:"leader,omitempty"`
}

// Bench measures committed writes: for each concurrency, that many
// clients (each with its own session) write 100-byte values to their own
// keys in a closed loop for d, through any node (requests to followers are
// forwarded). Every write is acknowledged only once a majority has it on
// disk (fsync).
func (c *Cluster) Bench(ctx context.Context, concurrencies []int, d time.Duration) ([]BenchRow, error) {
	return c.bench(ctx, c.ClientConfig(), concurrencies, d)
}

// BenchThrough is Bench with clients that know only node id's address:
// through the leader, every write goes straight to it; through a
// follower, the follower forwards every write to the leader.
func (c *Cluster) BenchThrough(ctx context.Context, id uint64, concurrencies []int, d time.Duration) ([]BenchRow, error) {
	n, err := c.node(id)
	if err != nil {
		return nil, err
	}
	return c.bench(ctx, c.Access().ClientConfig(n.HTTP), concurrencies, d)
}

func (c *Cluster) bench(ctx context.Context, cfg client.Config, concurrencies []int, d time.Duration) ([]BenchRow, error) {
	var rows []BenchRow
	value := make([]byte, 100)
	for _, n := range concurrencies {
		if n < 1 {
			return nil, fmt.Errorf("%w: concurrency %d", ErrInvalid, n)
		}
		clients := make([]*client.Client, n)
		for w := range clients {
			cl, err := client.New(cfg)
			if err != nil {
				return nil, err
			}
			clients[w] = cl
		}
		lat, errs, secs := bench.ClosedLoop(ctx, n, d, 5*time.Second, func(ctx context.Context, w int) error {
			_, err := clients[w].Put(ctx, fmt.Sprintf("bench/%d/%d", n, w), value)
			return err
		})
		row := BenchRow{Concurrency: n, Ops: len(lat), Errors: errs, Seconds: secs, PerSecond: float64(len(lat)) / secs}
		if len(lat) > 0 {
			row.P50, row.P99 = bench.Percentile(lat, 50), bench.Percentile(lat, 99)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// Failover is one leader kill: how long until the survivors agreed on a
// new leader, and how many terms the election took (more than one: a split
// vote).
type Failover struct {
	Took  time.Duration `json:"took_ns"`
	Terms uint64        `json:"terms"`
}

// Failovers kills the leader n times (SIGKILL), each time measuring how
// long until the other nodes agree on a new leader, then restarts the
// killed node and lets the cluster settle.
func (c *Cluster) Failovers(ctx context.Context, n int, settle time.Duration) ([]Failover, error) {
	var out []Failover
	for range n {
		f, err := c.failover(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, f)
		select {
		case <-time.After(settle):
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	return out, nil
}

// failover kills the leader, measures the time until the others agree on
// a new one, and restarts the killed node, all within a minute.
func (c *Cluster) failover(ctx context.Context) (Failover, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		return Failover{}, err
	}
	before, err := c.Status(ctx, leader)
	if err != nil {
		return Failover{}, err
	}
	t0 := time.Now()
	if err := c.Kill(leader); err != nil {
		return Failover{}, err
	}
	next, err := c.WaitLeader(ctx)
	if err != nil {
		return Failover{}, err
	}
	f := Failover{Took: time.Since(t0)}
	if st, err := c.Status(ctx, next); err == nil {
		f.Terms = st.Term - before.Term
	}
	return f, c.Restart(ctx, leader)
}

// BenchConfig configures RunBench and RunCompare: a fresh cluster of
// Nodes real processes of Binary in Dir (fsync on), each with a Raft tick
// of Tick.
type BenchConfig struct {
	Nodes  int
	Dir    string
	Binary string
	Tick   time.Duration
	// Concurrency lists the client concurrencies to measure, each for
	// Duration (Cluster.Bench).
	Concurrency []int
	Duration    time.Duration
	// Failovers is the number of leader kills to measure (0: none), with
	// Settle between them (Cluster.Failovers). RunCompare measures none.
	Failovers int
	Settle    time.Duration
	// Insecure measures a cluster without TLS and tokens (RunBench).
	Insecure bool
	// Progress, if set, hears what is being measured (RunBench; the
	// command prints it on stderr).
	Progress func(format string, args ...any)
}

// Validate names the first field out of range.
func (c BenchConfig) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > 9:
		return fmt.Errorf("%w: nodes %d: want 1 to 9", ErrInvalid, c.Nodes)
	case c.Dir == "" || c.Binary == "":
		return fmt.Errorf("%w: Dir and Binary are required", ErrInvalid)
	case c.Tick <= 0 || c.Duration <= 0:
		return fmt.Errorf("%w: tick %v and duration %v must be positive", ErrInvalid, c.Tick, c.Duration)
	case c.Failovers < 0 || c.Settle < 0:
		return fmt.Errorf("%w: failovers %d and settle %v must not be negative", ErrInvalid, c.Failovers, c.Settle)
	}
	for _, n := range c.Concurrency {
		if n < 1 || n > 1024 {
			return fmt.Errorf("%w: concurrency %d: want 1 to 1024", ErrInvalid, n)
		}
	}
	return nil
}

// startLeading starts a cluster of cfg in cfg.Dir/sub and waits for its
// leader.
func startLeading(ctx context.Context, cfg BenchConfig, sub string, insecure bool) (*Cluster, error) {
	dir := filepath.Join(cfg.Dir, sub)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c, err := Start(ctx, Config{Nodes: cfg.Nodes, Dir: dir, Binary: cfg.Binary, Insecure: insecure,
		Args: []string{"--tick", cfg.Tick.String()}})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.WaitLeader(wctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// BenchReport is what RunBench measured.
type BenchReport struct {
	Nodes  int    `json:"nodes"`
	Tick   string `json:"tick"`
	Secure bool   `json:"secure"`
	// Writes are through the leader (clients that know only its
	// address), FollowerWrites through a follower (which forwards them;
	// none in a cluster of one), and NodeAlone what the node package
	// alone does at the same concurrency on the same disk (bench/raftnode:
	// no HTTP, TLS, sessions or state machine), the yardstick of the
	// server. They are measured in turn at each concurrency.
	Writes          []BenchRow     `json:"writes"`
	FollowerWrites  []BenchRow     `json:"follower_writes,omitempty"`
	NodeAlone       []raftnode.Row `json:"node_alone"`
	FailoverSeconds []float64      `json:"failover_seconds"`
	Failovers       []Failover     `json:"failovers"`
}

// RunBench starts a cluster of cfg and, at each concurrency in turn,
// measures its writes through the leader, through a follower, and the node
// package alone (in this process, on cfg.Dir's disk); then its failovers;
// and stops it. The leader is looked up again before each measurement: a
// row names the node that led when it began.
func RunBench(ctx context.Context, cfg BenchConfig) (BenchReport, error) {
	r := BenchReport{Nodes: cfg.Nodes, Tick: cfg.Tick.String(), Secure: !cfg.Insecure}
	if err := cfg.Validate(); err != nil {
		return r, err
	}
	progress := cfg.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	progress("starting a %d-node cluster in %s", cfg.Nodes, cfg.Dir)
	c, err := startLeading(ctx, cfg, ".", cfg.Insecure)
	if err != nil {
		return r, err
	}
	defer c.Close()
	for _, n := range cfg.Concurrency {
		leader, err := c.waitLeaderWithin(ctx, 30*time.Second)
		if err != nil {
			return r, err
		}
		progress("%d clients through the leader, node %d, for %v", n, leader, cfg.Duration)
		row, err := c.benchOne(ctx, leader, leader, n, cfg.Duration)
		if err != nil {
			return r, err
		}
		r.Writes = append(r.Writes, row)
		if follower := c.followerOf(leader); follower != 0 {
			if leader, err = c.waitLeaderWithin(ctx, 30*time.Second); err != nil {
				return r, err
			}
			if follower = c.followerOf(leader); follower != 0 {
				progress("%d clients through a follower, node %d (node %d leads), for %v", n, follower, leader, cfg.Duration)
				row, err := c.benchOne(ctx, follower, leader, n, cfg.Duration)
				if err != nil {
					return r, err
				}
				r.FollowerWrites = append(r.FollowerWrites, row)
			}
		}
		progress("the node package alone, %d proposers, for %v", n, cfg.Duration)
		alone, err := nodeAlone(ctx, cfg, n)
		if err != nil {
			return r, err
		}
		r.NodeAlone = append(r.NodeAlone, alone)
	}
	if cfg.Failovers > 0 {
		progress("%d failovers (the leader killed with SIGKILL)", cfg.Failovers)
	}
	if r.Failovers, err = c.Failovers(ctx, cfg.Failovers, cfg.Settle); err != nil {
		return r, err
	}
	for _, f := range r.Failovers {
		r.FailoverSeconds = append(r.FailoverSeconds, f.Took.Seconds())
	}
	return r, nil
}

func (c *Cluster) waitLeaderWithin(ctx context.Context, d time.Duration) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return c.WaitLeader(ctx)
}

// followerOf returns the lowest running node other than leader, or 0.
func (c *Cluster) followerOf(leader uint64) uint64 {
	for _, id := range c.IDs() {
		if id != leader && c.Running(id) {
			return id
		}
	}
	return 0
}

// benchOne measures n clients through node id, leader leading.
func (c *Cluster) benchOne(ctx context.Context, id, leader uint64, n int, d time.Duration) (BenchRow, error) {
	rows, err := c.BenchThrough(ctx, id, []int{n}, d)
	if err != nil {
		return BenchRow{}, err
	}
	rows[0].Node, rows[0].Leader = id, leader
	return rows[0], nil
}

// nodeAlone measures the node package alone at n proposers, on the disk
// of cfg.Dir, and removes its data.
func nodeAlone(ctx context.Context, cfg BenchConfig, n int) (raftnode.Row, error) {
	dir, err := os.MkdirTemp(cfg.Dir, "node-alone-")
	if err != nil {
		return raftnode.Row{}, err
	}
	defer os.RemoveAll(dir)
	rows, err := raftnode.Run(ctx, raftnode.Config{Nodes: cfg.Nodes, Dir: dir, Concurrency: []int{n}, Duration: cfg.Duration, ValueBytes: 100})
	if err != nil {
		return raftnode.Row{}, fmt.Errorf("localcluster: the node package alone: %w", err)
	}
	return rows[0], nil
}

// WriteText prints the report as a table of writes, and the failover
// times' distribution.
func (r BenchReport) WriteText(w io.Writer) error {
	mode := "mutual TLS, HTTPS and tokens"
	if !r.Secure {
		mode = "--insecure"
	}
	fmt.Fprintf(w, "%d-node cluster on loopback, fsync on, tick %s, %s\n", r.Nodes, r.Tick, mode)
	fmt.Fprintf(w, "node alone: the node package without HTTP, TLS, sessions or state machine, on the same disk\n\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\tthrough\twrites/s\tof node alone\tp50\tp99\twrites\terrors\t")
	for i, row := range r.Writes {
		var alone float64
		if i < len(r.NodeAlone) {
			alone = r.NodeAlone[i].PerSecond
		}
		of := func(v float64) string {
			if alone <= 0 {
				return "-"
			}
			return fmt.Sprintf("%.0f%%", 100*v/alone)
		}
		fmt.Fprintf(tw, "%d\tleader (node %d)\t%.0f\t%s\t%s\t%s\t%d\t%d\t\n", row.Concurrency, row.Node, row.PerSecond, of(row.PerSecond),
			fmtMS(row.P50), fmtMS(row.P99), row.Ops, row.Errors)
		if i < len(r.FollowerWrites) {
			f := r.FollowerWrites[i]
			fmt.Fprintf(tw, "\tfollower (node %d; %d led)\t%.0f\t%s\t%s\t%s\t%d\t%d\t\n", f.Node, f.Leader, f.PerSecond, of(f.PerSecond),
				fmtMS(f.P50), fmtMS(f.P99), f.Ops, f.Errors)
		}
		if i < len(r.NodeAlone) {
			a := r.NodeAlone[i]
			fmt.Fprintf(tw, "\tnode alone\t%.0f\t100%%\t%s\t%s\t%d\t%d\t\n", a.PerSecond, fmtMS(a.P50), fmtMS(a.P99), a.Ops, a.Errors)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.FailoverSeconds) == 0 {
		return nil
	}
	s := slices.Sorted(slices.Values(r.FailoverSeconds))
	split := 0
	for _, f := range r.Failovers {
		if f.Terms > 1 {
			split++
		}
	}
	q := func(p float64) float64 { return s[min(len(s)-1, int(p*float64(len(s))))] }
	fmt.Fprintf(w, "\nfailover (leader killed, %d times): min %.2f s, p50 %.2f s, p90 %.2f s, max %.2f s; %d needed more than one election\n",
		len(s), s[0], q(0.5), q(0.9), s[len(s)-1], split)
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = fmt.Sprintf("%.2f", v)
	}
	_, err := fmt.Fprintf(w, "  all: %s\n", strings.Join(parts, " "))
	return err
}

// CompareRow is one concurrency measured on a secure and an insecure
// cluster; Ratio is the secure writes per second over the insecure.
type CompareRow struct {
	Secure   BenchRow `json:"secure"`
	Insecure BenchRow `json:"insecure"`
	Ratio    float64  `json:"ratio"`
}

// CompareReport is what RunCompare measured.
type CompareReport struct {
	Nodes   int          `json:"nodes"`
	Tick    string       `json:"tick"`
	Compare []CompareRow `json:"compare"`
}

// RunCompare measures the cost of security: it starts a secure and an
// insecure cluster of cfg side by side and runs each concurrency on both,
// one after the other, alternating which goes first.
func RunCompare(ctx context.Context, cfg BenchConfig) (CompareReport, error) {
	r := CompareReport{Nodes: cfg.Nodes, Tick: cfg.Tick.String()}
	if err := cfg.Validate(); err != nil {
		return r, err
	}
	secure, err := startLeading(ctx, cfg, "secure", false)
	if err != nil {
		return r, err
	}
	defer secure.Close()
	plain, err := startLeading(ctx, cfg, "insecure", true)
	if err != nil {
		return r, err
	}
	defer plain.Close()
	for i, n := range cfg.Concurrency {
		order := []*Cluster{secure, plain}
		if i%2 == 1 {
			order = []*Cluster{plain, secure}
		}
		got := map[*Cluster]BenchRow{}
		for _, c := range order {
			rows, err := c.Bench(ctx, []int{n}, cfg.Duration)
			if err != nil {
				return r, err
			}
			got[c] = rows[0]
		}
		row := CompareRow{Secure: got[secure], Insecure: got[plain]}
		if row.Insecure.PerSecond > 0 {
			row.Ratio = row.Secure.PerSecond / row.Insecure.PerSecond
		}
		r.Compare = append(r.Compare, row)
	}
	return r, nil
}

// WriteText prints the comparison as a table.
func (r CompareReport) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "%d-node clusters on loopback, fsync on, tick %s: secure (mutual TLS, HTTPS, tokens) vs --insecure, side by side\n\n", r.Nodes, r.Tick)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\tsecure writes/s\tinsecure writes/s\tratio\tsecure p50\tinsecure p50\tsecure p99\tinsecure p99\terrors\t")
	for _, row := range r.Compare {
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.2f\t%s\t%s\t%s\t%s\t%d/%d\t\n", row.Secure.Concurrency, row.Secure.PerSecond, row.Insecure.PerSecond, row.Ratio,
			fmtMS(row.Secure.P50), fmtMS(row.Insecure.P50), fmtMS(row.Secure.P99), fmtMS(row.Insecure.P99), row.Secure.Errors, row.Insecure.Errors)
	}
	return tw.Flush()
}

func fmtMS(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

package raftnode

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync/atomic"
	"time"

	"coord/bench"
	"coord/node"
	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/vfs"
	"coord/transport/tcp"
)

// ErrInvalid wraps every Config.Validate failure.
var ErrInvalid = errors.New("raftnode: invalid config")

// Config configures Run.
type Config struct {
	// Nodes is the cluster's size (1 to 9).
	Nodes int
	// Dir holds each node's data directory (fsync on: it should be on the
	// disk the cluster being compared uses).
	Dir string
	// Concurrency lists the numbers of proposers to measure, each for
	// Duration.
	Concurrency []int
	Duration    time.Duration
	// ValueBytes is the size of each proposal's data.
	ValueBytes int
	// Progress, if set, hears what is being measured (for stderr).
	Progress func(format string, args ...any)
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > 9:
		return fmt.Errorf("%w: Nodes %d: want 1 to 9", ErrInvalid, c.Nodes)
	case c.Dir == "":
		return fmt.Errorf("%w: Dir is empty", ErrInvalid)
	case c.Duration <= 0:
		return fmt.Errorf("%w: Duration %v must be positive", ErrInvalid, c.Duration)
	case c.ValueBytes < 0 || c.ValueBytes > 1<<20:
		return fmt.Errorf("%w: ValueBytes %d: want 0 to 1 MiB", ErrInvalid, c.ValueBytes)
	}
	for _, n := range c.Concurrency {
		if n < 1 || n > 1024 {
			return fmt.Errorf("%w: concurrency %d: want 1 to 1024", ErrInvalid, n)
		}
	}
	return nil
}

// Row is the figure at one concurrency: proposals applied on the leader
// per second, and the latency of each from Propose to its return.
type Row struct {
	Concurrency int           `json:"concurrency"`
	Ops         int           `json:"ops"`
	Errors      int           `json:"errors"`
	Seconds     float64       `json:"seconds"`
	PerSecond   float64       `json:"per_second"`
	P50         time.Duration `json:"p50_ns"`
	P99         time.Duration `json:"p99_ns"`
}

// Run starts a cluster of cfg.Nodes node.Nodes in this process, each on
// its own raftstore.Disk under cfg.Dir (the real file system, fsync on)
// and its own TCP transport on loopback (plain TCP), waits for a leader,
// and measures proposals made on the leader at each concurrency: that many
// goroutines call Node.Propose in a closed loop for cfg.Duration. It is
// the node package alone, without HTTP, TLS, sessions or the server's
// state machine: the yardstick of what the server makes of it.
func Run(ctx context.Context, cfg Config) ([]Row, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := start(cfg)
	if err != nil {
		return nil, err
	}
	defer c.close()
	leader, err := c.waitLeader(ctx, 30*time.Second)
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, n := range cfg.Concurrency {
		if cfg.Progress != nil {
			cfg.Progress("node package alone: %d proposers for %v", n, cfg.Duration)
		}
		rows = append(rows, measure(ctx, leader, n, cfg.Duration, cfg.ValueBytes))
	}
	return rows, ctx.Err()
}

// measure runs n proposers on leader for d.
func measure(ctx context.Context, leader *node.Node, n int, d time.Duration, valueBytes int) Row {
	value := make([]byte, valueBytes)
	lat, errs, secs := bench.ClosedLoop(ctx, n, d, 5*time.Second, func(ctx context.Context, _ int) error {
		_, err := leader.Propose(ctx, value)
		return err
	})
	row := Row{Concurrency: n, Ops: len(lat), Errors: errs, Seconds: secs, PerSecond: float64(len(lat)) / secs}
	if len(lat) > 0 {
		row.P50, row.P99 = bench.Percentile(lat, 50), bench.Percentile(lat, 99)
	}
	return row
}

// counter is the state machine: it counts what it applied, which is all a
// snapshot holds.
type counter struct{ applied atomic.Uint64 }

func (c *counter) Apply(uint64, []byte) any { return c.applied.Add(1) }

func (c *counter) Snapshot() ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, c.applied.Load()), nil
}

func (c *counter) Restore(data []byte) error {
	if len(data) != 8 {
		return fmt.Errorf("raftnode: snapshot of %d bytes, want 8", len(data))
	}
	c.applied.Store(binary.BigEndian.Uint64(data))
	return nil
}

type cluster struct {
	nodes []*node.Node
	trs   []*tcp.Transport
	disks []*raftstore.Disk
}

func start(cfg Config) (c *cluster, err error) {
	c = &cluster{}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	quiet := slog.New(slog.DiscardHandler)
	ids := make([]uint64, cfg.Nodes)
	listeners := make([]net.Listener, cfg.Nodes)
	peers := map[uint64]string{}
	for i := range ids {
		ids[i] = uint64(i + 1)
		if listeners[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			for _, l := range listeners[:i] {
				l.Close()
			}
			return c, err
		}
		peers[ids[i]] = listeners[i].Addr().String()
	}
	for i, id := range ids {
		disk, err := raftstore.Open(vfs.OS, filepath.Join(cfg.Dir, fmt.Sprintf("node%d", id)), raftstore.Options{Logger: quiet})
		if err != nil {
			for _, l := range listeners[i:] {
				l.Close()
			}
			return c, err
		}
		c.disks = append(c.disks, disk)
		var shell atomic.Pointer[node.Node]
		tc := tcp.DefaultConfig()
		tc.ID, tc.Listener, tc.Peers, tc.Logger = id, listeners[i], peers, quiet
		tc.Deliver = func(m raft.Message) {
			if n := shell.Load(); n != nil {
				n.Deliver(m)
			}
		}
		tc.Unreachable = func(to uint64) {
			if n := shell.Load(); n != nil {
				n.ReportUnreachable(to)
			}
		}
		tr, err := tcp.New(tc)
		if err != nil {
			for _, l := range listeners[i:] {
				l.Close()
			}
			return c, err
		}
		c.trs = append(c.trs, tr)
		nc := node.DefaultConfig()
		nc.Raft.ID, nc.Raft.Peers = id, ids
		nc.Storage, nc.Transport, nc.StateMachine, nc.Logger = disk, tr, &counter{}, quiet
		n, err := node.Start(nc)
		if err != nil {
			for _, l := range listeners[i+1:] {
				l.Close()
			}
			return c, err
		}
		shell.Store(n)
		c.nodes = append(c.nodes, n)
	}
	return c, nil
}

func (c *cluster) waitLeader(ctx context.Context, within time.Duration) (*node.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		for _, n := range c.nodes {
			changed := n.Changed()
			if st := n.Status(); st.Role == raft.Leader && st.Commit == st.LastIndex {
				return n, nil
			}
			select {
			case <-changed:
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return nil, fmt.Errorf("raftnode: no leader: %w", ctx.Err())
			}
		}
	}
}

func (c *cluster) close() {
	for _, n := range c.nodes {
		_ = n.Stop()
	}
	for _, tr := range c.trs {
		_ = tr.Close()
	}
	for _, d := range c.disks {
		_ = d.Close()
	}
}

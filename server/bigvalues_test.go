package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// A cluster over real TCP writing values of several MB from several
// clients at once keeps its leader and replicates every value. Before
// appends were bounded in bytes in flight (raft.Config.MaxInflightBytes)
// and the transport's write deadline was renewed per slice, a leader
// queued hundreds of MB of appends on one connection under one 2 s
// deadline: the write timed out, the connection was dropped with the
// heartbeats behind it, and the cluster re-elected again and again (1 MB
// values from 64 clients). No timing is asserted: only that the term does
// not change (with elections after 5 to 10 s of silence, which a loaded
// machine does not reach but a dropped connection's lost heartbeats do)
// and every node ends with every value.
func TestLargeValuesKeepTheLeaderAndReplicate(t *testing.T) {
	const (
		valueBytes = 3 << 20
		writers    = 4
		perWriter  = 3
	)
	c := &testCluster{t: t, peers: map[uint64]string{}, https: map[uint64]net.Listener{}, nodes: map[uint64]*testNode{},
		configFor: func(_ uint64, cfg *Config) {
			// Elections after 5 to 10 s of silence: a broken link
			// (heartbeats dropped with the connection) costs the leader
			// its term, not a loaded machine (the race detector's
			// copies of MB values, another process's fsyncs).
			cfg.TickInterval = 100 * time.Millisecond
			cfg.ElectionTicks = 50
			cfg.SnapshotEntries = 10000
			cfg.Limits.ValueBytes = 4 << 20
		}}
	c.apiConfig.Limits = DefaultLimits()
	c.apiConfig.Limits.ValueBytes = 4 << 20
	c.startNodes(3)
	leader := c.waitLeader()
	term := c.nodes[leader].Status().Term

	value := func(w, i int) []byte {
		return bytes.Repeat([]byte{byte('a' + w), byte('0' + i)}, valueBytes/2)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				cmd := Command{Op: OpPut, Key: fmt.Sprintf("big/%d/%d", w, i), Value: value(w, i)}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				res, err := c.nodes[leader].Propose(ctx, cmd)
				cancel()
				if err == nil && res.Status != StatusOK {
					err = fmt.Errorf("status %v", res.Status)
				}
				if err != nil {
					errs <- fmt.Errorf("put %s: %w", cmd.Key, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for id, n := range c.nodes {
		waitApplied(t, n, 5*time.Minute, "every large value applied", func(v View) bool {
			for w := range writers {
				for i := range perWriter {
					kv, ok := v.Get(fmt.Sprintf("big/%d/%d", w, i))
					if !ok || !bytes.Equal(kv.Value, value(w, i)) {
						return false
					}
				}
			}
			return true
		})
		if st := n.Status(); st.Term != term || st.Leader != leader {
			t.Errorf("node %d: term %d, leader %d; want term %d, leader %d unchanged", id, st.Term, st.Leader, term, leader)
		}
	}
}

// A value limit too large for one transport frame is refused up front:
// the leader could never send an append carrying such a value.
func TestConfigRefusesValuesOverATransportFrame(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.Peers, cfg.DataDir = 1, map[uint64]string{1: "127.0.0.1:1"}, t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	cfg.Limits.ValueBytes = 16 << 20
	if err := cfg.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Limits.ValueBytes") {
		t.Fatalf("Validate with 16 MiB values = %v, want ErrInvalid naming Limits.ValueBytes", err)
	}
	if _, err := NewNode(cfg); !errors.Is(err, ErrInvalid) {
		t.Fatalf("NewNode with 16 MiB values = %v, want ErrInvalid", err)
	}
}

package server

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"coord/client"
)

// BenchmarkFollowerWriteAcrossTransfer measures what a client sees of a
// write sent to a follower just as the leader hands over to the other
// follower (a leader deposed, as on SIGTERM): how long until the follower
// answers, and what. Each iteration starts a transfer, then PUTs through
// the follower that is not its target, and waits for the new leader before
// the next. Metrics: the median and largest answer time, and the share of
// answers that were OK, unavailable (provably not applied: a retry is
// safe anywhere) and unknown_outcome (a retry is safe only in a session).
// Run: go test ./server -run '^$' -bench FollowerWriteAcrossTransfer
// -benchtime 40x.
func BenchmarkFollowerWriteAcrossTransfer(b *testing.B) {
	client := &http.Client{Timeout: 60 * time.Second}
	codes := map[string]int{}
	took := acrossTransfers(b, func(i int, f *testNode, _ []string) {
		req, _ := http.NewRequest("PUT", fmt.Sprintf("%s/v1/kv/bench/%d", f.httpURL, i), strings.NewReader("v"))
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		code := "ok"
		if resp.StatusCode != http.StatusOK {
			code, _ = decodeBody(body)["code"].(string)
		}
		codes[code]++
	})
	reportTimes(b, took, "answer")
	for _, code := range []string{"ok", "unavailable", "unknown_outcome"} {
		b.ReportMetric(float64(codes[code])/float64(len(took)), code+"/op")
	}
}

// BenchmarkFollowerWriteAcrossTransferClient is the same write made with
// the Go client (coord/client), given the follower first: the time until
// the client's Put succeeds, retries and all.
func BenchmarkFollowerWriteAcrossTransferClient(b *testing.B) {
	took := acrossTransfers(b, func(i int, _ *testNode, endpoints []string) {
		cfg := client.DefaultConfig(endpoints...)
		cfg.WarmInterval = 0
		cl, err := client.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := cl.Put(ctx, fmt.Sprintf("bench/%d", i), []byte("v")); err != nil {
			b.Fatal(err)
		}
	})
	reportTimes(b, took, "put")
}

// acrossTransfers runs write once per iteration on a 3-node cluster, just
// after the leader was asked to hand over to one follower; write gets the
// other follower and every node's API address, that follower's first. It
// returns how long each write took.
func acrossTransfers(b *testing.B, write func(i int, f *testNode, endpoints []string)) []time.Duration {
	c := &testCluster{t: b, peers: map[uint64]string{}, https: map[uint64]net.Listener{}, nodes: map[uint64]*testNode{}}
	c.startNodes(3)
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		leader := c.waitLeader()
		var target, f *testNode
		for _, id := range slices.Sorted(maps.Keys(c.nodes)) {
			switch n := c.nodes[id]; {
			case id == leader:
			case target == nil:
				target = n
			default:
				f = n
			}
		}
		endpoints := []string{f.httpURL, c.nodes[leader].httpURL, target.httpURL}
		for {
			if _, ok := f.tr.PeerMeta(leader); ok {
				break
			}
			<-time.After(5 * time.Millisecond) // no event to wait on: connections come from the transport's goroutines
		}
		if err := c.nodes[leader].shell.TransferLeadership(context.Background(), target.id); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		write(i, f, endpoints)
		took = append(took, time.Since(start))
		// The next round starts from a settled cluster, led by another.
		for c.waitLeader() == leader {
			<-time.After(10 * time.Millisecond) // waitLeader returns at once while all agree on the old one
		}
	}
	return took
}

// reportTimes reports the median and largest of took, in milliseconds.
func reportTimes(b *testing.B, took []time.Duration, what string) {
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, what+"-ms-p50")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, what+"-ms-max")
}

// BenchmarkForwardedWrites measures writes proposed by 256 concurrent
// callers on a 3-node cluster (real disks, the Raft transport over
// loopback TCP), through the leader (Node.Propose) and through a follower
// (Node.ProposeForwarded: each write forwarded to the leader as a Raft
// proposal, answered once the follower applied it). It leaves out the API
// and its connections, so that what the follower's forwarding costs beside
// the leader's own proposals shows: writes/s, the process's CPU time per
// write (the three nodes' and the callers' together), and with -benchmem
// the allocations per write (the whole process's too).
// Run: go test ./server -run '^$' -bench ForwardedWrites -benchmem
// -benchtime 20000x.
func BenchmarkForwardedWrites(b *testing.B) {
	const callers = 256
	for _, via := range []string{"leader", "follower"} {
		b.Run("via="+via, func(b *testing.B) {
			c := &testCluster{t: b, peers: map[uint64]string{}, https: map[uint64]net.Listener{}, nodes: map[uint64]*testNode{},
				configFor: func(_ uint64, cfg *Config) {
					d := DefaultConfig()
					cfg.TickInterval, cfg.SnapshotEntries, cfg.SnapshotLogPercent = d.TickInterval, d.SnapshotEntries, d.SnapshotLogPercent
				}}
			c.startNodes(3)
			defer func() {
				for _, n := range c.nodes {
					n.stop()
				}
			}()
			leader := c.waitLeader()
			n := c.nodes[leader]
			write := func(ctx context.Context, cmd Command) (Result, error) { return n.Propose(ctx, cmd) }
			if via == "follower" {
				n = c.follower(leader)
				waitPeerConnected(b, n, leader)
				write = n.ProposeForwarded
			}
			value := []byte(strings.Repeat("v", 256))
			ctx := context.Background()
			if _, err := write(ctx, Command{Op: OpPut, Key: "warm", Value: value}); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			errs := make(chan error, callers)
			start, cpu0 := time.Now(), cpuTime()
			b.ResetTimer()
			for range callers {
				go func() {
					var err error
					for i := next.Add(1); i <= int64(b.N) && err == nil; i = next.Add(1) {
						_, err = write(ctx, Command{Op: OpPut, Key: fmt.Sprintf("bench/%d", i%1000), Value: value})
					}
					errs <- err
				}()
			}
			for range callers {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "writes/s")
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/write")
		})
	}
}

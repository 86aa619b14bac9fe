package raft_test

import (
	"errors"
	"fmt"
	"testing"

	"coord/raft"
	"coord/raft/rafttest"
)

// BenchmarkFlowControlUnderReads measures what a follower with a slow disk
// gets from its leader while clients read: its acknowledgements come once
// every ackIntervals heartbeat intervals (one write of its disk), its
// heartbeat answers every interval, read rounds several times an interval
// (reads=N). The leader has the default flow control (MaxInflightBytes 8
// MiB, MaxAppendBytes 1 MiB) and a backlog of 1 MB writes. It reports
// the peak of the entry data sent to the follower and not yet acknowledged
// (peak-unacked-MB), and the entries committed per heartbeat interval
// (entries/interval). Not a timing: everything runs in simulated ticks,
// and each figure is the same at every run.
//
//	go test ./raft -run '^$' -bench FlowControlUnderReads -benchtime 1x
func BenchmarkFlowControlUnderReads(b *testing.B) {
	for _, reads := range []int{0, 10} {
		b.Run(fmt.Sprintf("reads=%d", reads), func(b *testing.B) {
			var got slowFollower
			for range b.N {
				got = slowFollowerUnderReads(b, reads, 1_000_000)
			}
			b.ReportMetric(got.peakUnackedBytes/1e6, "peak-unacked-MB")
			b.ReportMetric(got.entriesPerInterval, "entries/interval")
		})
	}
}

// BenchmarkAppendsUnderReads counts the append messages a follower with a
// slow disk gets from its leader while clients read, when its window has
// room: the scenario of BenchmarkFlowControlUnderReads with 100-byte
// writes, so every entry is sent at once and waits for the follower's
// disk. It reports the appends sent to the follower per heartbeat interval
// (appends/interval), and the empty ones among them
// (empty-appends/interval): a heartbeat answer, one per read round, gets
// the follower an empty append at most once an interval; the others carry
// the commit index after an acknowledgement. Deterministic, like
// BenchmarkFlowControlUnderReads.
//
//	go test ./raft -run '^$' -bench AppendsUnderReads -benchtime 1x
func BenchmarkAppendsUnderReads(b *testing.B) {
	for _, reads := range []int{0, 10} {
		b.Run(fmt.Sprintf("reads=%d", reads), func(b *testing.B) {
			var got slowFollower
			for range b.N {
				got = slowFollowerUnderReads(b, reads, 100)
			}
			b.ReportMetric(got.appendsPerInterval, "appends/interval")
			b.ReportMetric(got.emptyAppendsPerInterval, "empty-appends/interval")
			b.ReportMetric(got.entriesPerInterval, "entries/interval")
		})
	}
}

// slowFollower is what slowFollowerUnderReads measured.
type slowFollower struct {
	// peakUnackedBytes is the peak of the entry data sent to the
	// follower and not yet acknowledged.
	peakUnackedBytes float64
	// entriesPerInterval are the entries committed per heartbeat
	// interval.
	entriesPerInterval float64
	// appendsPerInterval are the appends sent to the follower per
	// heartbeat interval, emptyAppendsPerInterval those without entries.
	appendsPerInterval, emptyAppendsPerInterval float64
}

// slowFollowerUnderReads runs the scenario of BenchmarkFlowControlUnderReads
// with reads read rounds an interval and writes of valueBytes.
func slowFollowerUnderReads(b *testing.B, reads, valueBytes int) slowFollower {
	const cycles, ackIntervals, writesPerInterval = 10, 5, 8
	n := rafttest.NewNetwork()
	if err := n.Bootstrap(1, 2); err != nil {
		b.Fatal(err)
	}
	leader, err := n.Node(1)
	if err != nil {
		b.Fatal(err)
	}
	leader.Core.Campaign()
	if err := n.Stabilize(1000); err != nil {
		b.Fatal(err)
	}
	start := leader.Core.Status().Commit
	heartbeats := func(m raft.Message) bool {
		return m.Type == raft.MsgHeartbeatRequest || m.Type == raft.MsgHeartbeatResponse
	}
	readID := uint64(0)
	var got slowFollower
	for range cycles {
		for range ackIntervals {
			for range writesPerInterval {
				_, _, err := leader.Core.Propose(make([]byte, valueBytes))
				if err != nil && !errors.Is(err, raft.ErrProposalDropped) {
					b.Fatal(err)
				}
			}
			for range reads {
				readID++
				if err := leader.Core.ReadIndex(readID); err != nil {
					b.Fatal(err)
				}
				if _, err := n.Process(); err != nil {
					b.Fatal(err)
				}
			}
			if err := n.Tick(1, 1); err != nil {
				b.Fatal(err)
			}
			// The heartbeats and their answers, twice: the read
			// rounds' and the tick's requests, then the answers.
			for range 2 {
				if _, err := n.Deliver(heartbeats); err != nil {
					b.Fatal(err)
				}
			}
		}
		unacked := 0
		for _, m := range n.Queue {
			if m.Type == raft.MsgAppendRequest && m.To == 2 {
				got.appendsPerInterval++
				if len(m.Entries) == 0 {
					got.emptyAppendsPerInterval++
				}
				for _, e := range m.Entries {
					unacked += len(e.Data)
				}
			}
		}
		got.peakUnackedBytes = max(got.peakUnackedBytes, float64(unacked))
		// The follower's disk write is done: it takes what came, answers,
		// and the leader hears the answers (and sends what they allow,
		// which waits for the next write).
		appends := func(m raft.Message) bool { return m.Type == raft.MsgAppendRequest }
		answers := func(m raft.Message) bool { return m.Type == raft.MsgAppendResponse }
		if _, err := n.Deliver(appends); err != nil {
			b.Fatal(err)
		}
		if _, err := n.Deliver(answers); err != nil {
			b.Fatal(err)
		}
	}
	const intervals = cycles * ackIntervals
	got.entriesPerInterval = float64(leader.Core.Status().Commit-start) / intervals
	got.appendsPerInterval /= intervals
	got.emptyAppendsPerInterval /= intervals
	return got
}

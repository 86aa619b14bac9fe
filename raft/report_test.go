package raft_test

import (
	"fmt"
	"testing"

	"coord/raft"
	"coord/raft/rafttest"
)

// A snapshot the transport reports as failed is sent again once the
// follower answers a heartbeat.
func TestReportSnapshotFailureRetries(t *testing.T) {
	n := cluster(t, 1, 2, 3)
	leader := elect(t, n, 1)
	if err := n.Crash(3); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, _, err := leader.Core.Propose(fmt.Appendf(nil, "x%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	mustStabilize(t, n)
	if err := n.Compact(1); err != nil {
		t.Fatal(err)
	}
	if err := n.Restart(3); err != nil {
		t.Fatal(err)
	}
	snapshots := func() int {
		c := 0
		for _, m := range n.Queue {
			if m.Type == raft.MsgSnapshotRequest {
				c++
			}
		}
		return c
	}
	// Heartbeat, rejection, snapshot: lose the snapshot on the way.
	for i := 0; i < 10 && snapshots() == 0; i++ {
		if err := n.Tick(1, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Deliver(func(m raft.Message) bool { return m.Type != raft.MsgSnapshotRequest }); err != nil {
			t.Fatal(err)
		}
	}
	if snapshots() != 1 {
		t.Fatalf("%d snapshots queued, want 1", snapshots())
	}
	n.Queue = nil
	if pr := leader.Core.Status().Progress[3]; pr.State != raft.ProgressSnapshot {
		t.Fatalf("progress of 3 is %v, want snapshot", pr.State)
	}
	leader.Core.ReportSnapshot(3, true)
	if pr := leader.Core.Status().Progress[3]; pr.State != raft.ProgressProbe {
		t.Fatalf("after a failed snapshot, progress of 3 is %v, want probe", pr.State)
	}
	for i := 0; i < 10; i++ {
		if err := n.Tick(1, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Deliver(nil); err != nil {
			t.Fatal(err)
		}
	}
	mustStabilize(t, n)
	if a, b := n.StatusLine(1), n.StatusLine(3); leader.Core.Status().Commit != mustNode(t, n, 3).Core.Status().Commit {
		t.Fatalf("node 3 did not catch up after the retry:\n%s\n%s", a, b)
	}
}

func mustNode(t *testing.T, n *rafttest.Network, id uint64) *rafttest.Node {
	t.Helper()
	node, err := n.Node(id)
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// ReportUnreachable makes the leader stop pipelining to a follower.
func TestReportUnreachableProbes(t *testing.T) {
	n := cluster(t, 1, 2)
	leader := elect(t, n, 1)
	if _, _, err := leader.Core.Propose([]byte("x")); err != nil {
		t.Fatal(err)
	}
	mustStabilize(t, n)
	if pr := leader.Core.Status().Progress[2]; pr.State != raft.ProgressReplicate {
		t.Fatalf("progress of 2 is %v, want replicate", pr.State)
	}
	leader.Core.ReportUnreachable(2)
	if pr := leader.Core.Status().Progress[2]; pr.State != raft.ProgressProbe {
		t.Fatalf("after ReportUnreachable, progress of 2 is %v, want probe", pr.State)
	}
}

// A Ready hands the application at most MaxCommittedBytesPerReady of
// committed entries (at least one).
func TestCommittedEntriesPerReadyBound(t *testing.T) {
	s := raft.NewMemoryStorage()
	var entries []raft.Entry
	entries = append(entries, raft.Entry{Index: 1, Term: 1, Type: raft.EntryConfChange,
		Data: raft.ConfChange{Changes: []raft.ConfChangeSingle{{Type: raft.ConfChangeAddVoter, NodeID: 1}}}.Marshal()})
	for i := uint64(2); i <= 10; i++ {
		entries = append(entries, raft.Entry{Index: i, Term: 1, Data: make([]byte, 100)})
	}
	_ = s.Append(entries)
	_ = s.SetHardState(raft.HardState{Term: 1, Commit: 10})
	cfg := rafttest.DefaultConfig(1)
	cfg.Storage = s
	cfg.MaxCommittedBytesPerReady = 250
	c, err := raft.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var batches []int
	for c.HasReady() {
		rd := c.Ready()
		if len(rd.CommittedEntries) > 0 {
			batches = append(batches, len(rd.CommittedEntries))
		}
		c.Advance(rd)
	}
	total := 0
	for _, b := range batches {
		total += b
		if b > 3 {
			t.Errorf("a Ready carried %d entries of 100 bytes with a 250-byte bound", b)
		}
	}
	if total != 10 || len(batches) < 4 {
		t.Errorf("batches %v: want all 10 entries in several Readies", batches)
	}
	if c.HasReady() {
		t.Error("HasReady after everything was advanced")
	}
}

// Peers only bootstraps an empty storage; a restarted node ignores it.
func TestPeersIgnoredOnRestart(t *testing.T) {
	s := raft.NewMemoryStorage()
	c := newCore(t, 1, s, 1, 2, 2, 3)
	sent(t, c, s)
	if got := c.Status().Conf.Voters; len(got) != 3 {
		t.Fatalf("bootstrapped voters %v, want (1 2 3)", got)
	}
	restarted := newCore(t, 1, s, 1, 9)
	if got := restarted.Status().Conf; !got.Equal(raft.ConfState{Voters: []uint64{1, 2, 3}}) {
		t.Fatalf("after restart with other Peers, membership is %v, want (1 2 3)", got)
	}
	if last, _ := s.LastIndex(); last != 1 {
		t.Fatalf("restart appended entries: last index %d", last)
	}
}

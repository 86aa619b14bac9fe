package server

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"coord/raft"
)

// status is a raft.Status with the fields the observer reads.
func status(term, lead uint64, role raft.Role) raft.Status {
	return raft.Status{ID: 1, HardState: raft.HardState{Term: term}, SoftState: raft.SoftState{Lead: lead, Role: role}}
}

// The observer turns a node's status changes and the messages it receives
// into elections: who won, when it began, how long it took, why.
func TestObserverRecordsElectionsWithTheirCause(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	o := newObserver(1)
	// Start: no leader, then node 2 wins term 2.
	o.status(status(1, 0, raft.Follower), 0, at(0))
	o.delivered(raft.Message{Type: raft.MsgVoteRequest, From: 2, Term: 2}, at(300))
	o.status(status(2, 2, raft.Follower), 0, at(320))
	// Node 2 leads; its heartbeats stop at 1000 ms; node 3 asks for votes
	// at 2500 ms and wins at 2540 ms.
	o.delivered(raft.Message{Type: raft.MsgHeartbeatRequest, From: 2, Term: 2, Commit: 7}, at(1000))
	o.delivered(raft.Message{Type: raft.MsgAppendRequest, From: 2, Term: 2, Commit: 5}, at(1000)) // an older append, delivered late
	if c := o.leaderCommitSeen(2); c != 7 {
		t.Errorf("leader commit seen in term 2: %d, want 7", c)
	}
	o.delivered(raft.Message{Type: raft.MsgVoteRequest, From: 3, Term: 3}, at(2500))
	o.status(status(3, 0, raft.Follower), 0, at(2510))
	o.status(status(3, 3, raft.Follower), 0, at(2540))
	// Node 3 goes silent too; this node's own timeout fires first, and it
	// wins term 4 after a second round (term 5).
	o.delivered(raft.Message{Type: raft.MsgHeartbeatRequest, From: 3, Term: 3}, at(3000))
	o.status(status(4, 0, raft.Candidate), 0, at(9000))
	o.status(status(5, 0, raft.Candidate), 0, at(9400))
	o.status(status(5, 1, raft.Leader), 0, at(9450))

	got := o.recentElections()
	if len(got) != 3 {
		t.Fatalf("%d elections, want 3: %+v", len(got), got)
	}
	first, second, third := got[2], got[1], got[0] // newest first
	if first.Leader != 2 || first.Term != 2 || first.TookMs != 320 || !strings.Contains(first.Reason, "no leader known yet") {
		t.Errorf("first election %+v: want node 2 in term 2, 320 ms after this node started without a leader", first)
	}
	if second.Leader != 3 || second.Previous != 2 || second.TookMs != 40 || second.SilenceMs == nil || *second.SilenceMs != 1540 ||
		!strings.Contains(second.Reason, "node 3's election timeout") || !strings.Contains(second.Reason, "last heard from leader 2 1510 ms before") {
		t.Errorf("second election %+v: want node 3 after 40 ms, leader 2 silent 1540 ms, caused by node 3's timeout", second)
	}
	if third.Leader != 1 || third.Term != 5 || third.StartTerm != 4 || third.TookMs != 450 ||
		!strings.Contains(third.Reason, "election timeout on this node (1)") {
		t.Errorf("third election %+v: want this node in term 5 after two rounds from term 4, 450 ms", third)
	}
	if c := o.leaderCommitSeen(2); c != 0 {
		t.Errorf("leader commit seen of term 2 in term 3: %d, want 0 (another leader's)", c)
	}
	if c := o.leaderCommitSeen(3); c != 0 {
		t.Errorf("leader commit seen in term 3: %d, want 0 (its heartbeat carried none)", c)
	}
	// A bounded memory: the oldest elections go.
	for i := range electionsMax + 5 {
		term := uint64(10 + 2*i)
		o.status(status(term, 0, raft.Follower), 0, at(20000+10*i))
		o.status(status(term, 2, raft.Follower), 0, at(20000+10*i+5))
	}
	if got := o.recentElections(); len(got) != electionsMax || got[0].Term != uint64(10+2*(electionsMax+4)) {
		t.Errorf("after many elections: %d kept, newest term %d", len(got), got[0].Term)
	}
}

func TestWriteRateCountsWholeSeconds(t *testing.T) {
	var w writeRate
	t0 := time.Unix(1000, 0)
	for _, s := range []struct {
		ms      int
		applied uint64
	}{{0, 0}, {500, 10}, {1200, 25}, {4100, 30}} {
		w.observe(t0.Add(time.Duration(s.ms)*time.Millisecond), s.applied)
	}
	if got, want := w.series(), []uint64{10, 15, 0, 0}; !slices.Equal(got, want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	// A long idle gap fills at most the window, and the window is bounded.
	w.observe(t0.Add(time.Hour), 31)
	if got := w.series(); len(got) != writeSeconds || got[len(got)-1] != 0 {
		t.Fatalf("after an hour idle: %d seconds, last %v", len(got), got[len(got)-1])
	}
}

// The leader reports each follower's lag and every node the time since
// each peer spoke; a peer removed from the configuration loses its series.
func TestPeerMetrics(t *testing.T) {
	m := NewMetrics()
	o := newObserver(1)
	now := time.Unix(1000, 0)
	o.delivered(raft.Message{From: 2}, now.Add(-300*time.Millisecond))
	o.delivered(raft.Message{From: 3}, now.Add(-2*time.Second))
	st := status(3, 1, raft.Leader)
	st.LastIndex = 100
	st.Conf = raft.ConfState{Voters: []uint64{1, 2, 3}}
	st.Progress = map[uint64]raft.Progress{1: {Match: 100}, 2: {Match: 98}, 3: {Match: 40}}
	m.setPeers(st, o, now)
	for peer, want := range map[string]float64{"2": 2, "3": 60} {
		if got := testutil.ToFloat64(m.peerLag.WithLabelValues(peer)); got != want {
			t.Errorf("lag of %s: %v, want %v", peer, got, want)
		}
	}
	if got := testutil.ToFloat64(m.peerContact.WithLabelValues("3")); got != 2 {
		t.Errorf("last contact of 3: %v s, want 2", got)
	}
	if n := testutil.CollectAndCount(m.peerLag); n != 2 {
		t.Errorf("%d lag series, want 2 (none for the leader itself)", n)
	}
	// Node 3 removed, and this node a follower now: no lag series, and
	// no series for node 3.
	st = status(4, 2, raft.Follower)
	st.Conf = raft.ConfState{Voters: []uint64{1, 2}}
	m.setPeers(st, o, now)
	if n := testutil.CollectAndCount(m.peerLag); n != 0 {
		t.Errorf("a follower reports %d lag series", n)
	}
	if n := testutil.CollectAndCount(m.peerContact); n != 1 {
		t.Errorf("%d contact series after node 3 left, want 1", n)
	}
}

// Lease transitions are counted as commands apply, whatever command made
// them; a command that changes nothing (a failed acquire, a renewal, an
// expiry that lost a race with a renewal) counts nothing.
func TestLeaseMetricsFollowTheAppliedLog(t *testing.T) {
	m := NewMetrics()
	s := &stateMachine{machine: NewMachine(DefaultLimits()), lessor: newLessor(time.Second), changed: make(chan struct{}), metrics: m}
	index := uint64(0)
	apply := func(c Command) Result {
		index++
		return s.Apply(index, c.Marshal()).(Result)
	}
	a := apply(Command{Op: OpAcquire, Key: "a", Holder: "h1", TTL: time.Second})
	b := apply(Command{Op: OpAcquire, Key: "b", Holder: "h2", TTL: time.Second})
	apply(Command{Op: OpAcquire, Key: "a", Holder: "h3", TTL: time.Second}) // held: refused
	apply(Command{Op: OpRenew, Key: "a", Holder: "h1", Token: a.Token, TTL: time.Second})
	apply(Command{Op: OpExpire, Key: "a", Token: a.Token, Renewed: a.Token}) // a renewal came after: refused
	apply(Command{Op: OpRelease, Key: "b", Holder: "h2", Token: b.Token})
	apply(Command{Op: OpExpire, Key: "a", Token: a.Token, Renewed: index - 2})
	apply(Command{Op: OpAcquire, Key: "c", Holder: "h4", TTL: time.Second})
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"granted", testutil.ToFloat64(m.leasesGranted), 3},
		{"revoked", testutil.ToFloat64(m.leasesRevoked), 1},
		{"expired", testutil.ToFloat64(m.leasesExpired), 1},
		{"held", testutil.ToFloat64(m.leasesHeld), 1},
	} {
		if c.got != c.want {
			t.Errorf("leases %s: %v, want %v", c.name, c.got, c.want)
		}
	}
	// A snapshot restored sets the gauge to what it holds.
	snap := s.machine.Snapshot()
	s2 := &stateMachine{machine: NewMachine(DefaultLimits()), lessor: newLessor(time.Second), changed: make(chan struct{}), metrics: NewMetrics()}
	if err := s2.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s2.metrics.leasesHeld); got != 1 {
		t.Errorf("held after restore: %v, want 1", got)
	}
}

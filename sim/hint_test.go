package sim

import (
	"strings"
	"testing"
	"time"
)

// Without faults no leader ever changes: the checker fails a run on the
// first change no fault explains. The runs are long enough to hold
// thousands of heartbeats under a steady write load.
func TestNoLeaderChangeWithoutFaults(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		cfg := testConfig(seed)
		cfg.Faults = nil
		cfg.Chaos = 20 * time.Second
		res := Run(cfg)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		if res.Stats.LeaderChanges != 0 || res.Stats.Leaders != 1 {
			t.Fatalf("seed %d: %d leaders elected, %d changes, without any fault", seed, res.Stats.Leaders, res.Stats.LeaderChanges)
		}
	}
}

// The checker itself: a leader deposed by no injected fault (here a
// transfer asked of the core behind the simulator's back) fails the run.
func TestUnprovokedLeaderChangeFailsTheRun(t *testing.T) {
	cfg := testConfig(7)
	cfg.Faults = nil
	cfg.Chaos = time.Hour
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.start()
	s.advance(2 * time.Second)
	l := s.leader()
	if l == nil {
		t.Fatal("no leader after 2s")
	}
	for _, id := range s.ids {
		if id != l.id {
			if err := l.h.Core().TransferLeadership(id); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	s.process(l)
	s.advance(3 * time.Second)
	if s.failure == nil || s.failure.Check != "leader change without a fault" {
		t.Fatalf("an unprovoked leader change passed the checker: %v", s.failure)
	}
}

// A leader that lost its quorum to faults (a voter's data directory lost,
// another's disk full, seed 2120 of coord sim --disk once) steps down near
// them; the elections after may split until the next leader comes more
// than the settle window after the last fault. That change is explained
// by the faults; one after a step-down far from any fault is not. The
// rule is checked on the Sim's own bookkeeping, step by step: the end to
// end case depends on how a run's events fall, and moves with every
// change to the node or the storage (seed 2120, then 5386, then none of
// seeds 1 to 20,000 showed it).
func TestLeaderLostToFaultsExplainsTheChange(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Faults = Faults{FaultCrash, FaultDiskFull} // no message faults: they explain every change
	cfg.Disk = true
	settle := int64(4*cfg.ElectionTicks) * int64(cfg.Tick/time.Microsecond)
	for _, tc := range []struct {
		name       string
		stepDowns  []int64 // when leaders stepped down, after the fault at 0
		unprovoked int
	}{
		{"one step-down near the fault", []int64{settle / 2}, 0},
		{"two step-downs near the fault", []int64{settle / 4, settle / 2}, 0},
		{"a step-down far from the fault", []int64{settle * 2}, 1},
		{"one near, one far", []int64{settle / 2, settle * 2}, 1},
		{"no step-down", nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var trace strings.Builder
			s.SetTrace(&trace)
			s.chaos = false
			s.leaderChanged(&node{id: 1}) // the first leader
			s.lastFault = 1_000_000
			for _, at := range tc.stepDowns {
				s.now = s.lastFault + at
				s.leaderSteppedDown()
			}
			s.now = s.lastFault + 3*settle // past the window
			s.leaderChanged(&node{id: 2})
			if s.stats.UnprovokedLeaderChanges != tc.unprovoked {
				t.Fatalf("%d leader changes no fault explains, want %d:\n%s", s.stats.UnprovokedLeaderChanges, tc.unprovoked, trace.String())
			}
			if explained := strings.Contains(trace.String(), "the leader before stopped leading near a fault"); explained != (tc.unprovoked == 0) {
				t.Fatalf("trace says explained by a step-down near a fault: %v, want %v:\n%s", explained, tc.unprovoked == 0, trace.String())
			}
		})
	}
}

// A killed leader's followers see its connections close: with the hint,
// a new leader is elected before the minimum election timeout could even
// elapse, in every trial, and in one election (no split vote). A crashed
// machine is silent: TestMeasureElections checks that no failover beats
// the timeout then.
func TestKilledLeaderIsReplacedBeforeTheElectionTimeout(t *testing.T) {
	ec := ElectionConfig{Trials: 200, Seed: 1, Nodes: 3, Tick: 100 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1,
		PreVote: true, CheckQuorum: true, LatencyMin: 100 * time.Microsecond, LatencyMax: time.Millisecond, Bound: time.Minute, Kill: true}
	timeout := ticks(ec, ec.ElectionTicks)
	for _, nodes := range []int{3, 5} {
		ec.Nodes = nodes
		res, err := MeasureElections(ec, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Failed != 0 || res.Times[len(res.Times)-1] >= timeout {
			t.Fatalf("%d nodes, leader killed: %d failed, slowest %v; want all below the election timeout %v",
				nodes, res.Failed, res.Times[len(res.Times)-1], timeout)
		}
		if res.SplitVotes != 0 {
			t.Errorf("%d nodes: %d of %d failovers needed a second election", nodes, res.SplitVotes, len(res.Times))
		}
		t.Logf("%d nodes, leader killed: median %v, p99 %v, max %v", nodes, res.Quantile(0.5), res.Quantile(0.99), res.Times[len(res.Times)-1])
	}
}

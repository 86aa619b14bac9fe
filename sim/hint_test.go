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
// another's disk full) stepped down near them; the cluster then had no
// quorum until the disk freed, and the elections after that split twice,
// so the next leader came more than the settle window after the last
// fault. That change is explained by the faults, and the run counts none
// unexplained. The seed shows the case (a trace line says so) with the
// simulator as it is; it changes when the runs do: scan seeds with this
// configuration for the first whose trace has the line.
func TestLeaderLostToFaultsExplainsTheChange(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Seed = 5386
	cfg.Disk = true
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var trace strings.Builder
	s.SetTrace(&trace)
	res := s.Run()
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if !strings.Contains(trace.String(), "the leader before stopped leading near a fault") {
		t.Fatalf("the run no longer shows the case (a leader elected past the settle window after a step-down near a fault):\n%s", trace.String())
	}
	if res.Stats.UnprovokedLeaderChanges != 0 {
		t.Fatalf("%d leader changes no fault explains:\n%s", res.Stats.UnprovokedLeaderChanges, trace.String())
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

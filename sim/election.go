package sim

import (
	"fmt"
	"slices"
	"time"
)

// ElectionConfig describes the leader-crash experiment of the Raft paper's
// Figure 16: a stable cluster, the leader crashed at a random moment within
// its heartbeat interval, and the time until a new leader is elected.
type ElectionConfig struct {
	// Trials is the number of leader crashes, each in a fresh cluster.
	Trials int
	// Seed is the first trial's seed; trial i uses Seed+i.
	Seed uint64
	// Nodes is the cluster size (the paper: 5).
	Nodes int
	// Tick is the simulated length of a raft tick.
	Tick time.Duration
	// ElectionTicks is the minimum election timeout; timeouts are drawn
	// from [ElectionTicks, 2*ElectionTicks) ticks.
	ElectionTicks int
	// HeartbeatTicks is the leader's heartbeat interval (the paper: half
	// the minimum election timeout).
	HeartbeatTicks int
	// PreVote and CheckQuorum configure the core.
	PreVote, CheckQuorum bool
	// LatencyMin and LatencyMax bound one message's delivery delay.
	LatencyMin, LatencyMax time.Duration
	// AlignTicks makes all nodes tick at the same instants (see
	// Config.AlignTicks).
	AlignTicks bool
	// Kill kills the leader's process instead of crashing its machine:
	// the followers see their connections to it close, a network delay
	// later, and take the hint (raft.Core.ReportPeerGone).
	Kill bool
	// Bound is how long a trial waits for a new leader before counting it
	// as failed.
	Bound time.Duration
}

// PaperElectionConfig returns the paper's setting: 5 servers, election
// timeouts of 150–300 ms, heartbeats every 75 ms, with a 5 ms tick (the
// smallest round tick that makes 75 ms a whole number of ticks).
func PaperElectionConfig() ElectionConfig {
	return ElectionConfig{
		Trials:         1000,
		Seed:           1,
		Nodes:          5,
		Tick:           5 * time.Millisecond,
		ElectionTicks:  30,
		HeartbeatTicks: 15,
		PreVote:        true,
		CheckQuorum:    true,
		LatencyMin:     1 * time.Millisecond,
		LatencyMax:     5 * time.Millisecond,
		Bound:          10 * time.Second,
	}
}

// ArticlesElectionConfig returns the setting of the articles' teaching
// simulation (Part 3): 3 nodes, election timeouts of 3, 4 or 5 s (3 +
// rand.Intn(3) seconds), heartbeats every second, neither pre-vote nor
// check-quorum. A 1 s tick with ElectionTicks 3 draws exactly those
// timeouts, and aligned ticks make two equal timeouts expire at the same
// instant, as the articles' timers, all started by the same heartbeat, do.
// Messages take 0.1-1 ms (in-process channels).
func ArticlesElectionConfig() ElectionConfig {
	return ElectionConfig{
		Trials:         1000,
		Seed:           1,
		Nodes:          3,
		Tick:           time.Second,
		ElectionTicks:  3,
		HeartbeatTicks: 1,
		LatencyMin:     100 * time.Microsecond,
		LatencyMax:     time.Millisecond,
		AlignTicks:     true,
		Bound:          time.Minute,
	}
}

// ElectionResult is the outcome of an election-time experiment.
type ElectionResult struct {
	Config ElectionConfig
	// Times holds the time from the crash to the new leader, sorted,
	// for the trials that elected one within the bound.
	Times []time.Duration
	// SplitVotes counts failovers whose first election did not produce a
	// leader (the new leader's term is more than one above the old).
	SplitVotes int
	// Failed counts trials with no new leader within the bound.
	Failed int
}

// Quantile returns the q-quantile (0..1) of the election times.
func (r ElectionResult) Quantile(q float64) time.Duration {
	if len(r.Times) == 0 {
		return 0
	}
	i := min(len(r.Times)-1, int(q*float64(len(r.Times))))
	return r.Times[i]
}

// SplitVoteRate is the fraction of successful failovers that needed more
// than one election.
func (r ElectionResult) SplitVoteRate() float64 {
	if len(r.Times) == 0 {
		return 0
	}
	return float64(r.SplitVotes) / float64(len(r.Times))
}

// MeasureElections runs the experiment. progress, if not nil, is called
// after each trial.
func MeasureElections(ec ElectionConfig, progress func()) (ElectionResult, error) {
	if ec.Trials <= 0 {
		return ElectionResult{}, fmt.Errorf("%w: Trials %d must be positive", ErrInvalidConfig, ec.Trials)
	}
	res := ElectionResult{Config: ec}
	for i := range ec.Trials {
		took, terms, ok, err := electionTrial(ec, ec.Seed+uint64(i))
		if err != nil {
			return res, err
		}
		switch {
		case !ok:
			res.Failed++
		default:
			res.Times = append(res.Times, took)
			if terms > 1 {
				res.SplitVotes++
			}
		}
		if progress != nil {
			progress()
		}
	}
	slices.Sort(res.Times)
	return res, nil
}

// electionTrial crashes the leader of a settled cluster and measures the
// time to the next leader and the number of terms it took.
func electionTrial(ec ElectionConfig, seed uint64) (took time.Duration, terms uint64, ok bool, err error) {
	cfg := DefaultConfig()
	cfg.Seed = seed
	cfg.Nodes = ec.Nodes
	cfg.Faults = nil
	cfg.Chaos = time.Hour // the trial drives the run itself
	cfg.Tick = ec.Tick
	cfg.ElectionTicks = ec.ElectionTicks
	cfg.HeartbeatTicks = ec.HeartbeatTicks
	cfg.PreVote = ec.PreVote
	cfg.CheckQuorum = ec.CheckQuorum
	cfg.LatencyMin, cfg.LatencyMax = ec.LatencyMin, ec.LatencyMax
	cfg.AlignTicks = ec.AlignTicks
	cfg.WriteInterval = time.Hour // no client load
	cfg.ReadInterval = time.Hour
	s, err := New(cfg)
	if err != nil {
		return 0, 0, false, err
	}
	s.start()
	// Settle: several election timeouts, then crash the leader at a
	// uniformly random moment within its heartbeat interval.
	settle := ticks(ec, 6*ec.ElectionTicks)
	heartbeat := ticks(ec, ec.HeartbeatTicks)
	s.advance(settle + time.Duration(s.rng.Int64N(int64(heartbeat))))
	if s.failure != nil {
		return 0, 0, false, s.failure
	}
	old := s.leader()
	if old == nil {
		return 0, 0, false, fmt.Errorf("sim: seed %d: no leader after %v", seed, settle)
	}
	oldTerm := old.h.Core().Status().Term
	crashedAt := s.now
	if ec.Kill {
		s.kill(old)
	} else {
		s.crash(old)
	}
	deadline := crashedAt + s.us(ec.Bound)
	for s.failure == nil && len(s.events) > 0 && s.events[0].at <= deadline {
		s.step(s.next())
		if l := s.leader(); l != nil {
			term := l.h.Core().Status().Term
			return time.Duration(s.now-crashedAt) * time.Microsecond, term - oldTerm, true, nil
		}
	}
	if s.failure != nil {
		return 0, 0, false, s.failure
	}
	return 0, 0, false, nil
}

// ticks returns the simulated duration of n ticks in ec.
func ticks(ec ElectionConfig, n int) time.Duration { return time.Duration(n) * ec.Tick }

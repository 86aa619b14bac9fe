package machines

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"coord/lab"
	"coord/server/localcluster"
	"coord/sim"
)

var failoverExperiment = lab.Experiment{
	Name:     "raft-failover",
	Rung:     lab.Machines,
	Short:    "crash the leader: time to a new one, and split votes",
	Shows:    "new leader, splits",
	Articles: "3–11 s, median 4 s; 5 of 13 failovers needed more than one election",
	Figure:   "4 s, 5/13",
	Help: `Crash the leader of a three-node cluster and measure the time until a new
leader is elected, and how many failovers needed more than one election (a
split vote: the new leader's term is more than one above the old one).

  articles  the articles' program (articles.go): election timeouts of
            3 + rand.Intn(3) s, heartbeats every second, no pre-vote; the
            leader crashed 10.1 s in, just after a heartbeat, as in the
            articles' runs. One of the articles' seconds is 25 ms
            here, measured in the articles' seconds; unlike the articles,
            every run crashes whoever leads, so every run is a leader crash.
  coord     coord's consensus core, in three settings side by side:
            - the articles' timing (ticks of 1 s, timeouts of 3-5 s,
              heartbeats every second), in the deterministic simulator;
            - the Raft paper's (Figure 16: five servers, timeouts 150-300 ms,
              heartbeats every 75 ms), in the simulator;
            - coord's defaults (ticks of 100 ms, timeouts 1-2 s, heartbeats
              every 100 ms), in the simulator and with real coord server
              processes on loopback, the leader killed with SIGKILL and the
              hint off: silence, as when the leader's machine dies;
            - the leader's process killed (SIGKILL) on a host that lives, in
              the simulator and with real processes: the kernel closes its
              connections, the followers take that as a hint and elect at
              once (docs/raft.md);
            - the leader stopped (SIGTERM): it hands leadership to its most
              up-to-date follower before it exits.
            The simulator's time is simulated: thousands of failovers in
            seconds, replayable from --seed. coord runs with pre-vote and
            check-quorum, as it does by default.

--trials sets the articles' runs; the simulator runs 15 times as many per
setting, and each real row one kill or stop for every four of the articles'
runs.

Predict before running: with timeouts drawn from only three values, how often
do two followers time out in the same instant? Does pre-vote prevent that?`,
	Quick: lab.Params{Trials: 13},
	Full:  lab.Params{Trials: 44},
	Run:   runFailover,
}

// failoverSetting is one row of the comparison.
type failoverSetting struct {
	Label string `json:"label"`
	// How says where it was measured: simulator, real processes, or the
	// articles' program on a scaled clock.
	How        string    `json:"how"`
	Seconds    []float64 `json:"seconds"`
	SplitVotes int       `json:"split_votes"`
	Failed     int       `json:"failed"`
}

func (s failoverSetting) summary() string {
	st := lab.Summarize(s.Seconds)
	return fmt.Sprintf("%s-%s s, median %s s; %d of %d split", fmtSeconds(st.Min), fmtSeconds(st.Max), fmtSeconds(st.Median), s.SplitVotes, len(s.Seconds))
}

// cell is the setting's summary cell: median seconds and split votes.
func (s failoverSetting) cell() string {
	return fmt.Sprintf("%s s, %d/%d", fmtSeconds(lab.Summarize(s.Seconds).Median), s.SplitVotes, len(s.Seconds))
}

func fmtSeconds(s float64) string {
	switch {
	case s >= 10:
		return fmt.Sprintf("%.0f", s)
	case s >= 1:
		return fmt.Sprintf("%.1f", s)
	case s >= 0.1:
		return fmt.Sprintf("%.2f", s)
	default: // milliseconds: the hint's and the hand-over's failovers
		return fmt.Sprintf("%.3f", s)
	}
}

// articlesFailover runs the articles' program once, crashing the leader at
// 10 s, and returns the failover time and the terms it took.
func articlesFailover(ctx context.Context, seed uint64) (seconds float64, terms int64, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, 60*articlesUnit)
	defer cancel()
	var mu sync.Mutex
	crashAt, oldTerm := -1.0, int64(0)
	var leaderTerm int64
	// 10.1 s: just after the leader's heartbeat of second 10, as in the
	// articles' runs, where the crash and the heartbeat fell on the same
	// instant (both at 10.63 s of their log).
	RunArticles(ctx, ArticlesConfig{Nodes: 3, Unit: articlesUnit, CrashAt: 10.1, CrashLeader: true, Seed: seed},
		func(e ArticlesEvent) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case e.What == "leader" && crashAt < 0:
				leaderTerm = e.Term
			case e.What == "crash":
				crashAt, oldTerm = e.At, leaderTerm
			case e.What == "leader" && !ok:
				seconds, terms, ok = e.At-crashAt, e.Term-oldTerm, true
				cancel()
			}
		})
	return seconds, terms, ok
}

// simFailovers measures coord's core in the simulator.
func simFailovers(label string, ec sim.ElectionConfig, progress func()) (failoverSetting, error) {
	res, err := sim.MeasureElections(ec, progress)
	if err != nil {
		return failoverSetting{}, err
	}
	return failoverSetting{Label: label, How: "simulator", Seconds: lab.Seconds(res.Times), SplitVotes: res.SplitVotes, Failed: res.Failed}, nil
}

// realFailovers does act to the leader of a real 3-node cluster started
// with args, n times.
func realFailovers(ctx context.Context, env *lab.Env, n int, label, how string, act func(*localcluster.Cluster, uint64) error, args ...string) (failoverSetting, error) {
	s := failoverSetting{Label: label, How: how}
	c, err := startCluster(ctx, env, 3, false, "failover", args...)
	if err != nil {
		return s, err
	}
	defer c.Close()
	for range n {
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		leader, err := c.WaitLeader(wctx)
		if err != nil {
			cancel()
			return s, err
		}
		st, err := c.Status(wctx, leader)
		if err != nil {
			cancel()
			return s, err
		}
		// A random phase against the heartbeats, as the paper's experiment.
		time.Sleep(time.Duration(env.Rand.IntN(100)) * time.Millisecond)
		killed := time.Now()
		if err := act(c, leader); err != nil {
			cancel()
			return s, err
		}
		next, err := c.WaitLeader(wctx)
		took := time.Since(killed)
		if err != nil {
			s.Failed++
		} else {
			s.Seconds = append(s.Seconds, took.Seconds())
			if nst, err := c.Status(wctx, next); err == nil && nst.Term > st.Term+1 {
				s.SplitVotes++
			}
		}
		err = c.Restart(wctx, leader)
		cancel()
		if err != nil {
			return s, err
		}
		env.Progress.Step()
	}
	return s, nil
}

func runFailover(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	simTrials := 15 * env.Trials
	realKills := max(2, env.Trials/4)
	env.Progress.Start("raft-failover", env.Trials+4*simTrials+3*realKills)
	defer env.Progress.Finish()

	art := failoverSetting{Label: "articles' program, articles' timing", How: "the articles' program, 1 s = 25 ms"}
	for range env.Trials {
		secs, terms, ok := articlesFailover(ctx, env.Rand.Uint64())
		switch {
		case !ok:
			art.Failed++
		default:
			art.Seconds = append(art.Seconds, secs)
			if terms > 1 {
				art.SplitVotes++
			}
		}
		env.Progress.Step()
	}

	seed := env.Rand.Uint64()
	latency := func(ec sim.ElectionConfig) sim.ElectionConfig {
		ec.Trials, ec.Seed = simTrials, seed
		return ec
	}
	articlesTiming := latency(sim.ElectionConfig{Nodes: 3, Tick: time.Second, ElectionTicks: 3, HeartbeatTicks: 1,
		PreVote: true, CheckQuorum: true, LatencyMin: 100 * time.Microsecond, LatencyMax: time.Millisecond, Bound: time.Minute})
	paper := latency(sim.PaperElectionConfig())
	defaults := latency(sim.ElectionConfig{Nodes: 3, Tick: 100 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1,
		PreVote: true, CheckQuorum: true, LatencyMin: 100 * time.Microsecond, LatencyMax: time.Millisecond, Bound: time.Minute})
	killed := defaults
	killed.Kill = true
	settings := []failoverSetting{art}
	for _, s := range []struct {
		label string
		ec    sim.ElectionConfig
	}{
		{"coord core, articles' timing", articlesTiming},
		{"coord core, paper's timing (5 nodes)", paper},
		{"coord core, coord defaults", defaults},
		{"coord core, defaults, process killed", killed},
	} {
		fs, err := simFailovers(s.label, s.ec, env.Progress.Step)
		if err != nil {
			return nil, err
		}
		settings = append(settings, fs)
	}
	kill := func(c *localcluster.Cluster, id uint64) error { return c.Kill(id) }
	stop := func(c *localcluster.Cluster, id uint64) error { return c.Stop(id) }
	// The first real row is the machine-crash case: the leader goes
	// silent, so the followers wait out their election timeout (SIGKILL
	// with the hint off, as if the leader's host had died with it).
	for _, r := range []struct {
		label, how string
		act        func(*localcluster.Cluster, uint64) error
		args       []string
	}{
		{"coord defaults, real processes", "real processes, SIGKILL, hint off (as a machine crash)", kill, []string{"--peer-close-hint=false"}},
		{"real processes, leader process killed", "real processes, SIGKILL: the followers see its connections close", kill, nil},
		{"real processes, leader SIGTERM", "real processes, SIGTERM: the leader hands over first", stop, nil},
	} {
		real, err := realFailovers(ctx, env, realKills, r.label, r.how, r.act, r.args...)
		if err != nil {
			return nil, err
		}
		settings = append(settings, real)
	}
	return failoverResult(settings), nil
}

func failoverResult(settings []failoverSetting) *lab.Result {
	art, core := settings[0], settings[1:]
	res := &lab.Result{Data: settings}
	res.Original = art.summary()
	res.Coord = fmt.Sprintf("paper's timing: %s; defaults, real: %s; leader process killed: %s; leader SIGTERM: %s",
		core[1].summary(), core[4].summary(), core[5].summary(), core[6].summary())
	res.Row.Original, res.Row.Coord = art.cell(), core[4].cell()
	var cats []string
	var medians, p90s, splits []float64
	failed := 0
	for _, s := range settings {
		st := lab.Summarize(s.Seconds)
		res.AddDetail(s.Label, "%s (%s; %d with no leader within the bound)", s.summary(), s.How, s.Failed)
		cats = append(cats, s.Label)
		medians = append(medians, st.Median)
		p90s = append(p90s, quantile(s.Seconds, 0.9))
		splits = append(splits, 100*float64(s.SplitVotes)/float64(max(1, len(s.Seconds))))
		if s.How != settings[0].How {
			failed += s.Failed
		}
	}
	res.Charts = []lab.Chart{
		{Name: "time", Title: "Time to a new leader after a leader crash", XLabel: "setting", YLabel: "seconds",
			Kind: lab.Bars, Categories: cats, Series: []lab.Series{{Label: "median", Values: medians}, {Label: "90th percentile", Values: p90s}}},
		{Name: "split", Title: "Failovers that needed more than one election", XLabel: "setting", YLabel: "percent",
			Kind: lab.Bars, Categories: cats, Series: []lab.Series{{Label: "split votes", Values: splits}}},
		{Name: "articles-timing", Title: "Failover time with the articles' timing (3-5 s timeouts)", XLabel: "seconds", YLabel: "share of the series' failovers (%)",
			Kind: lab.Histogram, Percent: true, Series: []lab.Series{{Label: art.Label, Values: art.Seconds}, {Label: core[0].Label, Values: core[0].Seconds}}},
	}
	med := lab.Summarize(art.Seconds).Median
	asArticles := len(art.Seconds) > 0 && med >= 2.5 && med <= 6 && art.SplitVotes > 0
	coordOK := failed == 0 && len(core[4].Seconds) > 0
	res.Verdict = lab.Judge(asArticles, coordOK, fmt.Sprintf(
		"articles' program: median %s s, %d of %d split (articles: median 4 s, 5 of 13); coord elected a new leader in every failover of every setting (%d failures)",
		fmtSeconds(med), art.SplitVotes, len(art.Seconds), failed))
	return res
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

//go:build linux

package processes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"coord/lab"
	"coord/lab/articles"
	"coord/lease"
)

var failoverExperiment = lab.Experiment{
	Name:     "failover",
	Rung:     lab.Processes,
	Short:    "kill -9 and SIGTERM of the leader: how long nobody leads",
	Shows:    "gap: kill -9/TERM",
	Articles: "kill -9: 9.53 s leaderless; SIGTERM: 0.31 s",
	Figure:   "9.53 s / 0.31 s",
	Help: `Three processes elect a leader through a lock file; the lab kills the leader
and measures how long the group has no leader: from the signal to the moment
another process announces that it leads.

  articles  the articles' lease program (coord articles lease): a 9 s lease
            renewed every 3 s, watchers checking every 3 s, whole-second
            timestamps compared with a strict less-than. On SIGTERM the leader
            deletes the lock file.
  coord     coord elect over the file backend, with the same 9 s TTL. A
            holder keeps a unix socket open for its tenure; the kernel closes
            it when the process dies, and watchers notice at once. On SIGTERM
            the leader releases the lease.

Each trial waits 3 to 6 s after the first election (a random phase against the
renewals, from --seed), then sends kill -9 or SIGTERM. --trials sets the trials
per signal and program, --procs the processes per trial. Trials run
concurrently (all at once in quick mode, six at a time at full size; an
articles' trial takes up to 20 s); the figures are seconds, so sharing the
cores does not blur them.

Predict before running: the articles' gap after kill -9 is at least the lease
time left since the last renewal plus part of a watch interval; how long can
it be at worst? And coord's, with the same 9 s TTL?`,
	Quick: lab.Params{Trials: 3, Procs: 3},
	Full:  lab.Params{Trials: 10, Procs: 3},
	Run:   runFailover,
}

const (
	implArticles = "articles"
	implCoord    = "coord"

	failoverTTL = 9 * time.Second
)

// failoverTrial is one kill of a leader.
type failoverTrial struct {
	Impl   string `json:"impl"`
	Signal string `json:"signal"`
	// DelaySeconds is how long after its election the leader was signalled.
	DelaySeconds float64 `json:"delay_seconds"`
	// GapSeconds is from the signal to another participant's election.
	GapSeconds float64 `json:"gap_seconds"`
	FailedOver bool    `json:"failed_over"`
	// MaxLeaders is the most participants that believed they led at once.
	MaxLeaders int `json:"max_leaders"`
	// Timeline, kept when coord had more than one leader at once, is the
	// trial's events in order: the evidence.
	Timeline []string `json:"timeline,omitempty"`
}

type failoverData struct {
	Procs  int             `json:"procs"`
	Trials []failoverTrial `json:"trials"`
}

func runFailover(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	type spec struct {
		impl  string
		sig   syscall.Signal
		delay time.Duration
	}
	var specs []spec
	for _, impl := range []string{implArticles, implCoord} {
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
			for range env.Trials {
				// Draw here: env.Rand is not safe for concurrent use.
				delay := 3*time.Second + time.Duration(env.Rand.Int64N(int64(3*time.Second)))
				specs = append(specs, spec{impl, sig, delay})
			}
		}
	}
	// Quick mode runs every trial at once; a full run keeps a few going.
	parallel := len(specs)
	if !env.Quick {
		parallel = 6
	}
	env.Progress.Start("failover", len(specs))
	trials := make([]failoverTrial, len(specs))
	errs := make([]error, len(specs))
	slots := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			dir := filepath.Join(env.Dir, "trial-"+strconv.Itoa(i))
			trials[i], errs[i] = failoverOnce(ctx, env, dir, s.impl, s.sig, s.delay)
			env.Progress.Step()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return failoverResult(failoverData{Procs: env.Procs, Trials: trials}), nil
}

func signalName(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "kill -9"
	}
	return "SIGTERM"
}

// failoverOnce runs one trial: elect, wait delay, signal the leader, time
// the next election.
func failoverOnce(ctx context.Context, env *lab.Env, dir, impl string, sig syscall.Signal, delay time.Duration) (failoverTrial, error) {
	t := failoverTrial{Impl: impl, Signal: signalName(sig), DelaySeconds: delay.Seconds()}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return t, err
	}
	path := filepath.Join(dir, "leader.lock")
	g := newGroup()
	defer g.stop()
	for p := range env.Procs {
		name := "p" + strconv.Itoa(p+1)
		args := []string{"articles", "lease", path, "--json"}
		if impl == implCoord {
			args = []string{"elect", "--store", "file://" + path, "--id", name, "--json", "--ttl", failoverTTL.String()}
		}
		if err := g.start(name, env.Command(ctx, args...)); err != nil {
			return t, err
		}
	}
	first, ok := g.waitEvent(ctx, 30*time.Second, isElected)
	if !ok {
		return t, fmt.Errorf("failover: %s: no leader within 30 s", impl)
	}
	sleep(ctx, delay)
	if ctx.Err() != nil {
		return t, ctx.Err()
	}
	killedAt, err := g.signal(first.Member, sig)
	if err != nil {
		return t, err
	}
	// The worst case is a whole lease plus a watch interval; allow more.
	next, ok := g.waitEvent(ctx, failoverTTL+articles.WatchInterval+15*time.Second, func(e event) bool {
		return e.Event.Event == lease.EventElected && e.Member != first.Member && e.MonoNS > killedAt
	})
	if ctx.Err() != nil {
		return t, ctx.Err()
	}
	if ok {
		t.FailedOver = true
		t.GapSeconds = monoSeconds(next.MonoNS - killedAt)
	}
	// Both signals end the process: once it has exited, every event it
	// printed has been read, and the timeline below is complete.
	if !g.waitExit(ctx, first.Member, 10*time.Second) {
		if ctx.Err() != nil {
			return t, ctx.Err()
		}
		return t, fmt.Errorf("failover: %s: %s did not exit within 10 s of %s", impl, first.Member, signalName(sig))
	}
	events, exits := g.snapshot(), g.exitTimes()
	t.MaxLeaders = maxLeaders(events, exits)
	if impl == implCoord && t.MaxLeaders > 1 {
		t.Timeline = timeline(events, exits, killedAt)
	}
	return t, nil
}

func gaps(ts []failoverTrial, impl, signal string) []float64 {
	var out []float64
	for _, t := range ts {
		if t.Impl == impl && t.Signal == signal && t.FailedOver {
			out = append(out, t.GapSeconds)
		}
	}
	return out
}

func trialsOf(ts []failoverTrial, impl string) []failoverTrial {
	var out []failoverTrial
	for _, t := range ts {
		if t.Impl == impl {
			out = append(out, t)
		}
	}
	return out
}

func failoverResult(d failoverData) *lab.Result {
	res := &lab.Result{Data: d, Verdict: judgeFailover(d)}
	median := func(impl, signal string) string {
		g := gaps(d.Trials, impl, signal)
		if len(g) == 0 {
			return "no failover"
		}
		return secs(lab.Summarize(g).Median)
	}
	res.Original = fmt.Sprintf("kill -9: %s, SIGTERM: %s (medians)", median(implArticles, "kill -9"), median(implArticles, "SIGTERM"))
	res.Coord = fmt.Sprintf("kill -9: %s, SIGTERM: %s (medians, same 9 s TTL)", median(implCoord, "kill -9"), median(implCoord, "SIGTERM"))
	cell := func(impl string) string {
		short := func(signal string) string {
			g := gaps(d.Trials, impl, signal)
			if len(g) == 0 {
				return "none"
			}
			return shortSeconds(lab.Summarize(g).Median)
		}
		return short("kill -9") + " / " + short("SIGTERM")
	}
	res.Row.Original, res.Row.Coord = cell(implArticles), cell(implCoord)
	res.AddDetail("workload", "%d processes per trial; leader signalled 3-6 s after its election", d.Procs)
	var series []lab.Series
	for _, impl := range []string{implArticles, implCoord} {
		for _, signal := range []string{"kill -9", "SIGTERM"} {
			g := gaps(d.Trials, impl, signal)
			s := lab.Summarize(g)
			all := 0
			for _, t := range d.Trials {
				if t.Impl == impl && t.Signal == signal {
					all++
				}
			}
			res.AddDetail(impl+", "+signal, "gap min %s, median %s, max %s; failed over in %d of %d trials",
				secs(s.Min), secs(s.Median), secs(s.Max), len(g), all)
			series = append(series, lab.Series{Label: impl + ", " + signal, Values: g})
		}
	}
	most := 0
	for _, t := range trialsOf(d.Trials, implCoord) {
		most = max(most, t.MaxLeaders)
	}
	res.AddDetail("coord, leaders at once", "at most %d in any trial", most)
	res.Charts = []lab.Chart{{
		Name: "gaps", Title: "failover: seconds with no leader", XLabel: "trial", YLabel: "seconds",
		Kind: lab.Trials, Series: series,
	}}
	return res
}

// judgeFailover: the articles' kill -9 gap lies between the lease left
// after a renewal and a whole lease plus a watch interval (6 to 12 s, plus
// a second of slack for the whole-second clock), their SIGTERM gap within a
// watch interval; coord fails over in every trial, within the TTL after
// kill -9, never with two leaders.
func judgeFailover(d failoverData) lab.Verdict {
	killMedian := lab.Summarize(gaps(d.Trials, implArticles, "kill -9")).Median
	termMedian := lab.Summarize(gaps(d.Trials, implArticles, "SIGTERM")).Median
	articleTrials := trialsOf(d.Trials, implArticles)
	asArticles := len(articleTrials) > 0 && len(gaps(d.Trials, implArticles, "kill -9"))+len(gaps(d.Trials, implArticles, "SIGTERM")) == len(articleTrials) &&
		killMedian >= (articles.LeaseDuration-articles.RenewInterval).Seconds() &&
		killMedian <= (articles.LeaseDuration+articles.WatchInterval+time.Second).Seconds() &&
		termMedian <= (articles.WatchInterval+500*time.Millisecond).Seconds()
	coordTrials := trialsOf(d.Trials, implCoord)
	coordOK := len(coordTrials) > 0
	var problems []string
	for _, t := range coordTrials {
		switch {
		case !t.FailedOver:
			coordOK = false
			problems = append(problems, fmt.Sprintf("coord did not fail over after %s", t.Signal))
		case t.MaxLeaders > 1:
			coordOK = false
			problems = append(problems, fmt.Sprintf("coord had %d leaders at once after %s: %s", t.MaxLeaders, t.Signal, strings.Join(t.Timeline, "; ")))
		case t.GapSeconds > failoverTTL.Seconds():
			coordOK = false
			problems = append(problems, fmt.Sprintf("coord took %s after %s, more than the TTL", secs(t.GapSeconds), t.Signal))
		}
	}
	reason := fmt.Sprintf("the articles' median gap was %s after kill -9 and %s after SIGTERM; coord's %s and %s",
		secs(killMedian), secs(termMedian),
		secs(lab.Summarize(gaps(d.Trials, implCoord, "kill -9")).Median), secs(lab.Summarize(gaps(d.Trials, implCoord, "SIGTERM")).Median))
	if len(problems) > 0 {
		reason += "; " + problems[0]
	}
	return lab.Judge(asArticles, coordOK, reason)
}

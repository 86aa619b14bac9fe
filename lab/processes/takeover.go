//go:build linux

package processes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"coord/lab"
	"coord/lab/articles"
)

var takeoverRaceExperiment = lab.Experiment{
	Name:     "takeover-race",
	Rung:     lab.Processes,
	Short:    "many watchers racing to take over an expired lease at one instant",
	Shows:    "expired-lease race",
	Articles: "remove-then-create is safe: O_EXCL picks one winner, the loser logs that it lost",
	Figure:   "one winner",
	Help: `A lease has expired and many watchers notice at the same moment. The articles
take over with remove, then create (O_EXCL), and argue that this is safe
because O_EXCL picks one winner. But a slow watcher that read the expired lease
can remove the file a fast one has just created, and then create its own: two
leaders. The lab counts the leaders each trial ends with ("reproduced" means
the articles' claim held: one leader in every trial):

  articles  the articles' lease program, released at one instant from a start
            line (a FIFO) against a lock file holding an expired lease, so
            that every watcher's first tick lands together.
  coord     coord elect watchers against a lease whose holder stopped renewing;
            they all wake at its expiry and race, through the file backend's
            compare-and-swap (link(2) of the next record version).

--trials sets the trials, --procs the watchers per trial. Quick mode scales the
articles' timings down (lease 3 s, renew 1 s, watch 1 s).

Predict before running: is the articles' takeover safe, as Part 2 argues? If
not, how often does a trial end with two leaders, and what do the two leaders
do to each other afterwards?`,
	Quick: lab.Params{Trials: 3, Procs: 8},
	Full:  lab.Params{Trials: 20, Procs: 10},
	Run:   runTakeoverRace,
}

// takeoverTrial is one race.
type takeoverTrial struct {
	// ArticlesLeaders is how many of the articles' watchers ended up
	// believing they led; ArticlesLostRace how many logged losing.
	ArticlesLeaders  int `json:"articles_leaders"`
	ArticlesLostRace int `json:"articles_lost_race"`
	// CoordLeaders is the most coord watchers that led at once;
	// CoordTokenGrew says the winner's token exceeded the expired holder's.
	CoordLeaders   int  `json:"coord_leaders"`
	CoordTokenGrew bool `json:"coord_token_grew"`
}

type takeoverData struct {
	Procs  int             `json:"procs"`
	Trials []takeoverTrial `json:"trials"`
}

// coordStaleTTL is the TTL of the coord holder that stops renewing.
const coordStaleTTL = time.Second

func runTakeoverRace(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	d := takeoverData{Procs: env.Procs}
	env.Progress.Start("takeover-race", env.Trials)
	for i := range env.Trials {
		var t takeoverTrial
		err := bothSides(filepath.Join(env.Dir, "trial-"+strconv.Itoa(i)),
			func(dir string) (err error) {
				t.ArticlesLeaders, t.ArticlesLostRace, err = articlesTakeover(ctx, env, dir)
				return err
			},
			func(dir string) (err error) {
				t.CoordLeaders, t.CoordTokenGrew, err = coordTakeover(ctx, env, dir)
				return err
			})
		if err != nil {
			return nil, err
		}
		d.Trials = append(d.Trials, t)
		env.Progress.Step()
	}
	return takeoverResult(d), nil
}

// articlesTakeover starts env.Procs of the articles' lease programs at one
// instant against an expired lease and counts who ends up leading.
func articlesTakeover(ctx context.Context, env *lab.Env, dir string) (leaders, lostRace int, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	path := filepath.Join(dir, "leader.lock")
	expired, _ := json.Marshal(articles.LeaseContent{ProcessID: 1, LeaseUntil: time.Now().Add(-time.Minute).Unix()})
	if err := os.WriteFile(path, expired, 0o644); err != nil {
		return 0, 0, err
	}
	_, _, watch := articlesTimings(env.Quick)
	line, err := newStartLine(dir)
	if err != nil {
		return 0, 0, err
	}
	defer line.close()
	g := newGroup()
	defer g.stop()
	for p := range env.Procs {
		args := append([]string{"--path", path, "--gate", line.path}, timingArgs(env.Quick)...)
		if err := g.start("p"+strconv.Itoa(p+1), env.ChildCommand(ctx, childArticlesLease, args...)); err != nil {
			return 0, 0, err
		}
	}
	if _, err := line.release(ctx, g, env.Procs); err != nil {
		return 0, 0, err
	}
	// Every watcher ticks once a watch interval after the start line;
	// wait past a second tick.
	sleep(ctx, watch*5/2)
	if ctx.Err() != nil {
		return 0, 0, ctx.Err()
	}
	g.stop() // drain every participant's pipe: the timeline is complete
	events := g.snapshot()
	for _, e := range events {
		if e.Event.Event == articles.EventLostRace {
			lostRace++
		}
	}
	return maxLeaders(events, g.exitTimes()), lostRace, nil
}

// coordTakeover makes a coord holder that stops renewing, starts env.Procs
// coord elect watchers, and counts the leaders among them after the expiry.
func coordTakeover(ctx context.Context, env *lab.Env, dir string) (leaders int, tokenGrew bool, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, false, err
	}
	path := filepath.Join(dir, "leader.lock")
	store := "file://" + path
	holder := newGroup()
	defer holder.stop()
	if err := holder.start("holder", env.ChildCommand(ctx, childContend, "--method", "coord", "--path", path, "--id", "holder", "--ttl", coordStaleTTL.String(), "--hold", "60s")); err != nil {
		return 0, false, err
	}
	held, ok := holder.waitEvent(ctx, 30*time.Second, isElected)
	if !ok {
		return 0, false, fmt.Errorf("takeover-race: the coord holder did not acquire within 30 s")
	}
	ttl, _, _ := articlesTimings(env.Quick)
	g := newGroup()
	defer g.stop()
	for p := range env.Procs {
		name := "w" + strconv.Itoa(p+1)
		args := []string{"elect", "--store", store, "--id", name, "--json", "--ttl", ttl.String()}
		if err := g.start(name, env.Command(ctx, args...)); err != nil {
			return 0, false, err
		}
	}
	winner, ok := g.waitEvent(ctx, 30*time.Second, isElected)
	if !ok {
		return 0, false, fmt.Errorf("takeover-race: no coord watcher took over within 30 s")
	}
	// Give any second winner time to show itself.
	sleep(ctx, 2*time.Second)
	if ctx.Err() != nil {
		return 0, false, ctx.Err()
	}
	g.stop() // drain every participant's pipe: the timeline is complete
	return maxLeaders(g.snapshot(), g.exitTimes()), winner.Token > held.Token, nil
}

func takeoverResult(d takeoverData) *lab.Result {
	res := &lab.Result{Data: d, Verdict: judgeTakeover(d)}
	var art, coord []int
	double, coordWrong, lost := 0, 0, 0
	for _, t := range d.Trials {
		art = append(art, t.ArticlesLeaders)
		coord = append(coord, t.CoordLeaders)
		lost += t.ArticlesLostRace
		if t.ArticlesLeaders > 1 {
			double++
		}
		if t.CoordLeaders != 1 || !t.CoordTokenGrew {
			coordWrong++
		}
	}
	res.Original = fmt.Sprintf("2+ leaders in %d/%d trials (most %d), none in %d", double, len(d.Trials), maxInt(art), countInts(art, 0))
	res.Coord = fmt.Sprintf("exactly one leader, with a greater token, in %d/%d trials", len(d.Trials)-coordWrong, len(d.Trials))
	res.Row.Original = fmt.Sprintf("2+ leaders %d/%d", double, len(d.Trials))
	res.Row.Coord = fmt.Sprintf("1 leader %d/%d", len(d.Trials)-coordWrong, len(d.Trials))
	res.AddDetail("workload", "%d watchers per trial, released at one instant", d.Procs)
	res.AddDetail("articles, leaders per trial", "%v; %d lost-the-race messages in all", art, lost)
	res.AddDetail("coord, leaders per trial", "%v", coord)
	res.Charts = []lab.Chart{{
		Name: "leaders", Title: fmt.Sprintf("takeover-race: leaders after the race (%d watchers)", d.Procs),
		XLabel: "trial", YLabel: "leaders", Kind: lab.Trials,
		Series: []lab.Series{
			{Label: "articles: remove, then create", Values: lab.Floats(art)},
			{Label: "coord: compare-and-swap by link(2)", Values: lab.Floats(coord)},
		},
	}}
	return res
}

func countInts(xs []int, want int) int {
	n := 0
	for _, x := range xs {
		if x == want {
			n++
		}
	}
	return n
}

func maxInt(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// judgeTakeover: the articles claim the takeover is safe, one winner per
// race; the original behaves as the articles report when every trial ends
// with exactly one leader, and a trial with two or more is a finding against
// the claim. coord must end every trial with exactly one leader whose token
// grew.
func judgeTakeover(d takeoverData) lab.Verdict {
	notOne, coordWrong := 0, 0
	for _, t := range d.Trials {
		if t.ArticlesLeaders != 1 {
			notOne++
		}
		if t.CoordLeaders != 1 || !t.CoordTokenGrew {
			coordWrong++
		}
	}
	reason := fmt.Sprintf("the articles' remove-then-create ended with exactly one leader in %d of %d trials; coord ended with exactly one leader, holding a greater token, in %d of %d",
		len(d.Trials)-notOne, len(d.Trials), len(d.Trials)-coordWrong, len(d.Trials))
	if notOne > 0 {
		reason += " (the articles call the takeover safe)"
	}
	return lab.Judge(len(d.Trials) > 0 && notOne == 0, len(d.Trials) > 0 && coordWrong == 0, reason)
}

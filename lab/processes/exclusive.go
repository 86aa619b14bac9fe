//go:build linux

package processes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"coord/lab"
	"coord/lease"
)

var exclusiveCreateExperiment = lab.Experiment{
	Name:     "exclusive-create",
	Rung:     lab.Processes,
	Short:    "N trials x M processes: stat-then-create, O_EXCL and coord, leaders per trial",
	Shows:    "stat+create, O_EXCL",
	Articles: "stat-then-create: 3/30 trials with two leaders; O_EXCL: 0/30",
	Figure:   "2 leaders: 3/30",
	Help: `Several processes race to become leader through one lock file, and the lab
counts how many declared themselves leader in each trial. Three ways:

  stat-then-create  the articles' first attempt: stat the file, create it if it
                    is missing. Two steps with a gap between them.
  O_EXCL            the articles' fix: open with O_CREATE|O_EXCL, one step in the
                    kernel.
  coord             coord's file backend: Acquire, a compare-and-swap that
                    links the next record version with link(2).

Each process is the coord binary running one attempt (the articles' code from
lab/articles, or coord's Acquire) and stays alive until every process of the
trial has decided. Processes start two ways: one after another, as a shell loop
would start them, each racing as soon as it is up; and all at one instant: each
waits at a start line (a FIFO that the lab opens once every process is
waiting, which the kernel answers by waking them all together). --trials sets
the trials per way and method, --procs the processes per trial.

Predict before running: how often will stat-then-create elect two leaders, and
does starting the processes at one instant change that? Can O_EXCL or coord
ever elect two? Can they elect none?`,
	Quick: lab.Params{Trials: 4, Procs: 8},
	Full:  lab.Params{Trials: 30, Procs: 30},
	Run:   runExclusiveCreate,
}

// The methods and start modes of exclusive-create.
const (
	methodStatCreate = "stat-then-create"
	methodExclusive  = "O_EXCL"
	methodCoord      = "coord"

	startSequential = "one after another"
	startTogether   = "at one instant"
)

// contendTrial is one trial: how many of the processes declared themselves
// leader, and how many decided at all.
type contendTrial struct {
	Leaders int `json:"leaders"`
	Decided int `json:"decided"`
	Errors  int `json:"errors"`
	// SpreadSeconds is the time between the first and last decision.
	SpreadSeconds float64 `json:"spread_seconds"`
}

// exclusiveData is what exclusive-create measured: trials per method and
// start mode.
type exclusiveData struct {
	Procs  int                                  `json:"procs"`
	Trials map[string]map[string][]contendTrial `json:"trials"` // method -> start mode -> trials
}

func runExclusiveCreate(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	d := exclusiveData{Procs: env.Procs, Trials: map[string]map[string][]contendTrial{}}
	methods := []string{methodStatCreate, methodExclusive, methodCoord}
	modes := []string{startSequential, startTogether}
	env.Progress.Start("exclusive-create", len(methods)*len(modes)*env.Trials)
	for _, method := range methods {
		d.Trials[method] = map[string][]contendTrial{}
	}
	for i := range env.Trials {
		// Interleave methods and modes so that a burst of load on the
		// machine hits all of them alike.
		for m, mode := range modes {
			for _, method := range methods {
				dir := filepath.Join(env.Dir, fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(method, "_", ""), i, m))
				t, err := contend(ctx, env, dir, method, mode == startTogether)
				if err != nil {
					return nil, err
				}
				d.Trials[method][mode] = append(d.Trials[method][mode], t)
				env.Progress.Step()
			}
		}
	}
	return exclusiveResult(d), nil
}

// contend runs one trial of method with env.Procs processes.
func contend(ctx context.Context, env *lab.Env, dir, method string, together bool) (contendTrial, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return contendTrial{}, err
	}
	path := filepath.Join(dir, "leader.lock")
	var line *startLine
	if together {
		var err error
		if line, err = newStartLine(dir); err != nil {
			return contendTrial{}, err
		}
		defer line.close()
	}
	g := newGroup()
	defer g.stop()
	flag := map[string]string{methodStatCreate: "stat-create", methodExclusive: "exclusive", methodCoord: "coord"}[method]
	for p := range env.Procs {
		name := "p" + strconv.Itoa(p+1)
		args := []string{"--method", flag, "--path", path, "--id", name, "--hold", "60s"}
		if line != nil {
			args = append(args, "--gate", line.path)
		}
		if err := g.start(name, env.ChildCommand(ctx, childContend, args...)); err != nil {
			return contendTrial{}, err
		}
	}
	if line != nil {
		if _, err := line.release(ctx, g, env.Procs); err != nil {
			return contendTrial{}, err
		}
	}
	decided := func(events []event) int {
		n := 0
		for _, e := range events {
			switch e.Event.Event {
			case lease.EventElected, eventNotElected, eventError:
				n++
			}
		}
		return n
	}
	g.waitFor(ctx, 30*time.Second, func(events []event) bool { return decided(events) >= env.Procs })
	if ctx.Err() != nil {
		return contendTrial{}, ctx.Err()
	}
	var t contendTrial
	var first, last int64
	for _, e := range g.snapshot() {
		switch e.Event.Event {
		case lease.EventElected:
			t.Leaders++
		case eventError:
			t.Errors++
			env.Logger.Warn("acquire failed", "method", method, "member", e.Member, "err", e.Error)
		case eventNotElected:
		default:
			continue
		}
		t.Decided++
		if first == 0 || e.MonoNS < first {
			first = e.MonoNS
		}
		last = max(last, e.MonoNS)
	}
	t.SpreadSeconds = monoSeconds(last - first)
	return t, nil
}

func leadersPerTrial(ts []contendTrial) []int {
	out := make([]int, len(ts))
	for i, t := range ts {
		out[i] = t.Leaders
	}
	return out
}

// countTrials counts trials satisfying pred.
func countTrials(ts []contendTrial, pred func(contendTrial) bool) int {
	n := 0
	for _, t := range ts {
		if pred(t) {
			n++
		}
	}
	return n
}

func notOne(t contendTrial) bool  { return t.Leaders != 1 }
func twoPlus(t contendTrial) bool { return t.Leaders > 1 }

func exclusiveResult(d exclusiveData) *lab.Result {
	res := &lab.Result{Data: d, Verdict: judgeExclusive(d)}
	count := func(method, mode string, pred func(contendTrial) bool) (int, int) {
		ts := d.Trials[method][mode]
		return countTrials(ts, pred), len(ts)
	}
	seqDouble, seqN := count(methodStatCreate, startSequential, twoPlus)
	togDouble, togN := count(methodStatCreate, startTogether, twoPlus)
	exclOne := len(all(d, methodExclusive)) - countTrials(all(d, methodExclusive), notOne)
	coordOne := len(all(d, methodCoord)) - countTrials(all(d, methodCoord), notOne)
	res.Original = fmt.Sprintf("stat-then-create: 2+ leaders in %d/%d trials started one after another, %d/%d at one instant; O_EXCL: one leader in %d/%d",
		seqDouble, seqN, togDouble, togN, exclOne, len(all(d, methodExclusive)))
	res.Coord = fmt.Sprintf("one leader in %d/%d trials", coordOne, len(all(d, methodCoord)))
	res.Row.Original = fmt.Sprintf("2 leaders: %d/%d", seqDouble+togDouble, seqN+togN)
	res.Row.Coord = fmt.Sprintf("1 leader: %d/%d", coordOne, len(all(d, methodCoord)))
	res.AddDetail("workload", "%d processes per trial, %d trials per method and start", d.Procs, len(d.Trials[methodCoord][startSequential]))
	for _, method := range []string{methodStatCreate, methodExclusive, methodCoord} {
		for _, mode := range []string{startSequential, startTogether} {
			ts := d.Trials[method][mode]
			maxLeaders, spread := 0, make([]float64, 0, len(ts))
			for _, t := range ts {
				maxLeaders = max(maxLeaders, t.Leaders)
				spread = append(spread, t.SpreadSeconds)
			}
			res.AddDetail(method+", "+mode, "leaders per trial %v; %d/%d not exactly one, most %d; decisions spread over a median %s",
				leadersPerTrial(ts), countTrials(ts, notOne), len(ts), maxLeaders, secs(lab.Summarize(spread).Median))
		}
	}
	var categories []string
	none, one, more := lab.Series{Label: "no leader"}, lab.Series{Label: "one leader"}, lab.Series{Label: "two or more"}
	for _, method := range []string{methodStatCreate, methodExclusive, methodCoord} {
		for _, mode := range []string{startSequential, startTogether} {
			short := map[string]string{startSequential: "shell", startTogether: "instant"}[mode]
			categories = append(categories, method+"\n"+short)
			ts := d.Trials[method][mode]
			none.Values = append(none.Values, float64(countTrials(ts, func(t contendTrial) bool { return t.Leaders == 0 })))
			one.Values = append(one.Values, float64(countTrials(ts, func(t contendTrial) bool { return t.Leaders == 1 })))
			more.Values = append(more.Values, float64(countTrials(ts, twoPlus)))
		}
	}
	res.Charts = []lab.Chart{{
		Name: "leaders", Title: fmt.Sprintf("exclusive-create: trials by leaders elected (%d processes)", d.Procs),
		XLabel: "method, start", YLabel: "trials", Kind: lab.Bars, Categories: categories,
		Series: []lab.Series{more, one, none}, // the palette's red for the failure
	}}
	return res
}

// all returns a method's trials of both start modes.
func all(d exclusiveData, method string) []contendTrial {
	return append(append([]contendTrial(nil), d.Trials[method][startSequential]...), d.Trials[method][startTogether]...)
}

// judgeExclusive: the articles' stat-then-create elects two leaders in some
// trial and O_EXCL exactly one in every trial; coord exactly one in every
// trial.
func judgeExclusive(d exclusiveData) lab.Verdict {
	stat, excl, coord := all(d, methodStatCreate), all(d, methodExclusive), all(d, methodCoord)
	statDouble := countTrials(stat, twoPlus)
	exclWrong := countTrials(excl, notOne)
	coordWrong := countTrials(coord, notOne)
	asArticles := len(stat) > 0 && statDouble > 0 && len(excl) > 0 && exclWrong == 0
	coordOK := len(coord) > 0 && coordWrong == 0
	reason := fmt.Sprintf("stat-then-create elected two or more leaders in %d of %d trials; exactly one leader was elected by O_EXCL in %d of %d, by coord in %d of %d",
		statDouble, len(stat), len(excl)-exclWrong, len(excl), len(coord)-coordWrong, len(coord))
	return lab.Judge(asArticles, coordOK, reason)
}

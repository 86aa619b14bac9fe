package threads

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"coord/lab"
)

const (
	incrementsPerGoroutine = 1000

	// longRuns x longIncrements: the race with one goroutine per core, each
	// running for milliseconds rather than a microsecond.
	longRuns       = 3
	longIncrements = 10_000_000
)

var raceExperiment = lab.Experiment{
	Name:     "race",
	Rung:     lab.Threads,
	Short:    "1000 goroutines x 1000 unsynchronised increments, and what -race says",
	Articles: "never a million, different every run, a narrow band; -race points at counter++",
	Help: `A thousand goroutines each add 1 to a shared counter a thousand times. The
articles' version does counter++ with no synchronisation; counter++ is a load,
an add and a store, and increments from two goroutines running at once
overwrite each other. coord's column is the fixed counter (value and mutex in
one struct).

The lab runs both --trials times and reports the racy totals' minimum, median
and maximum and how wide the band is, then builds the same program with -race
(go build -race, in a subprocess; needs the go toolchain, and says so when it
is missing) and reports what the race detector prints for each version.

--procs sets the number of goroutines (default 1000).

Predict before running: will the total ever be 1,000,000? How far below, and
how much will it vary from run to run? On a machine with few cores, fewer
goroutines run at the same instant: does that make the loss larger or smaller?`,
	Quick: lab.Params{Trials: 30, Procs: 1000},
	Full:  lab.Params{Trials: 30, Procs: 1000},
	Run:   runRace,
}

// raceData is what the race experiment measured.
type raceData struct {
	Goroutines  int       `json:"goroutines"`
	Increments  int       `json:"increments"`
	Expected    int       `json:"expected"`
	RacyTotals  []int     `json:"racy_totals"`
	FixedTotals []int     `json:"fixed_totals"`
	Racy        lab.Stats `json:"racy"`

	// LongGoroutines x LongIncrements is the same racy counter with few
	// goroutines that each run long enough to overlap on every core: the
	// evidence that the race is real where the articles' short goroutines
	// happen not to overlap.
	LongGoroutines int   `json:"long_goroutines"`
	LongIncrements int   `json:"long_increments"`
	LongTotals     []int `json:"long_totals"`

	// LoadAverage is the machine's load when the counting ended.
	LoadAverage float64 `json:"load_average"`

	// Detector is "ran", or why the race detector could not be run.
	Detector      string      `json:"detector"`
	DetectorRacy  *raceReport `json:"detector_racy,omitempty"`
	DetectorFixed *raceReport `json:"detector_fixed,omitempty"`
}

func runRace(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	d := raceData{Goroutines: env.Procs, Increments: incrementsPerGoroutine, Expected: env.Procs * incrementsPerGoroutine}
	env.Progress.Start("race", 2*env.Trials+2+longRuns)
	for range env.Trials {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d.RacyTotals = append(d.RacyTotals, racyCount(d.Goroutines, d.Increments))
		env.Progress.Step()
		d.FixedTotals = append(d.FixedTotals, mutexCount(d.Goroutines, d.Increments))
		env.Progress.Step()
	}
	d.Racy = lab.Summarize(lab.Floats(d.RacyTotals))
	d.LoadAverage = lab.LoadAverage()
	d.LongGoroutines, d.LongIncrements = runtime.GOMAXPROCS(0), longIncrements
	for range longRuns {
		d.LongTotals = append(d.LongTotals, racyCountTogether(d.LongGoroutines, d.LongIncrements))
		env.Progress.Step()
	}
	var err error
	d.DetectorRacy, d.DetectorFixed, d.Detector, err = detect(ctx, env, d.Goroutines, d.Increments)
	if err != nil {
		return nil, err
	}
	return raceResult(d), nil
}

// detect builds the counter with -race and runs both modes once. A missing
// toolchain or a failed build is reported in the returned status, not as an
// error: the in-process totals still stand.
func detect(ctx context.Context, env *lab.Env, goroutines, increments int) (racy, fixed *raceReport, status string, err error) {
	defer env.Progress.Step()
	bin, err := buildProgram(ctx, env.Dir, "counter", true)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, "", ctx.Err()
		}
		env.Logger.Warn("race detector not run", "err", err)
		return nil, nil, "not run: " + err.Error(), nil
	}
	env.Progress.Step()
	r, err := runRaceCounter(ctx, bin, "racy", goroutines, increments)
	if err != nil {
		return nil, nil, "", err
	}
	f, err := runRaceCounter(ctx, bin, "mutex", goroutines, increments)
	if err != nil {
		return nil, nil, "", err
	}
	return &r, &f, "ran", nil
}

func raceResult(d raceData) *lab.Result {
	res := &lab.Result{Data: d, Verdict: judgeRace(d)}
	band := int(d.Racy.Max - d.Racy.Min)
	res.Original = fmt.Sprintf("min %s, median %s, max %s (band %s)",
		commas(int(d.Racy.Min)), commas(int(d.Racy.Median)), commas(int(d.Racy.Max)), percentOf(band, d.Expected))
	res.Coord = fmt.Sprintf("%s in %d/%d runs", commas(d.Expected), countEqual(d.FixedTotals, d.Expected), len(d.FixedTotals))
	switch {
	case d.DetectorRacy != nil:
		res.Original += fmt.Sprintf("; -race: %d DATA RACE", d.DetectorRacy.Races)
		res.Coord += fmt.Sprintf("; -race: %s", silentOr(d.DetectorFixed.Races))
	default:
		res.Original += "; -race not run"
		res.Coord += "; -race not run"
	}
	res.AddDetail("workload", "%s goroutines x %s increments, %d runs each", commas(d.Goroutines), commas(d.Increments), len(d.RacyTotals))
	res.AddDetail("racy totals", "min %s, median %s, max %s; %d of %d runs wrong, %d distinct totals",
		commas(int(d.Racy.Min)), commas(int(d.Racy.Median)), commas(int(d.Racy.Max)),
		len(d.RacyTotals)-countEqual(d.RacyTotals, d.Expected), len(d.RacyTotals), distinct(d.RacyTotals))
	res.AddDetail("band", "%s wide, %s of the right answer (the articles: much narrower than pure randomness would suggest)",
		commas(band), percentOf(band, d.Expected))
	res.AddDetail("lost updates", "median %s per run (%s)", commas(d.Expected-int(d.Racy.Median)), percentOf(d.Expected-int(d.Racy.Median), d.Expected))
	if len(d.LongTotals) > 0 {
		long := d.LongGoroutines * d.LongIncrements
		res.AddDetail("long goroutines", "%d goroutines x %s increments (one per core, started together, each running for milliseconds): totals %s of %s, median loss %s",
			d.LongGoroutines, commas(d.LongIncrements), joinInts(d.LongTotals), commas(long), percentOf(long-medianInt(d.LongTotals), long))
		switch {
		case countEqual(d.RacyTotals, d.Expected) > 0 && medianInt(d.LongTotals) < long:
			res.AddDetail("why", "each of the 1000 goroutines does its 1000 increments in about a microsecond, often before another core has woken up to run a second one at the same time; where they never overlap no update is lost, and the race is there all the same")
		case countEqual(d.RacyTotals, d.Expected) > 0:
			res.AddDetail("why", "not even one goroutine per core, started together and running for milliseconds, lost an update: the goroutines never ran at the same time, as when other work holds the other cores (load average %.1f on %d CPUs); the race detector sees the race all the same",
				d.LoadAverage, runtime.NumCPU())
		}
	}
	if d.DetectorRacy != nil {
		res.AddDetail("-race, racy", "%d DATA RACE report(s), exit status %d, total %s: %s",
			d.DetectorRacy.Races, d.DetectorRacy.ExitCode, commas(d.DetectorRacy.Total), d.DetectorRacy.First)
		res.AddDetail("-race, fixed", "%s, exit status %d, total %s", silentOr(d.DetectorFixed.Races), d.DetectorFixed.ExitCode, commas(d.DetectorFixed.Total))
	} else {
		res.AddDetail("race detector", "%s", d.Detector)
	}
	res.Charts = []lab.Chart{{
		Name: "totals", Title: "race: counter totals per run", XLabel: "run", YLabel: "final total",
		Kind: lab.Trials,
		Series: []lab.Series{
			{Label: "articles: counter++ unsynchronised", Values: lab.Floats(d.RacyTotals)},
			{Label: "coord: value and mutex in one struct", Values: lab.Floats(d.FixedTotals)},
		},
	}}
	return res
}

// judgeRace: the articles' counter is wrong on every run and the detector
// (when it ran) reports a race; coord's is right on every run and the
// detector is silent.
func judgeRace(d raceData) lab.Verdict {
	wrong := len(d.RacyTotals) - countEqual(d.RacyTotals, d.Expected)
	fixedRight := countEqual(d.FixedTotals, d.Expected)
	coordOK := len(d.FixedTotals) > 0 && fixedRight == len(d.FixedTotals)
	asArticles := len(d.RacyTotals) > 0 && wrong == len(d.RacyTotals)
	var problems []string
	if d.DetectorFixed != nil && (d.DetectorFixed.Races > 0 || d.DetectorFixed.Total != d.Expected) {
		coordOK = false
		problems = append(problems, fmt.Sprintf("-race reported %d race(s) in the fixed counter", d.DetectorFixed.Races))
	}
	if d.DetectorRacy != nil && d.DetectorRacy.Races == 0 {
		asArticles = false
		problems = append(problems, "-race reported nothing for the racy counter")
	}
	reason := fmt.Sprintf("the racy counter was wrong in %d of %d runs; the fixed one right in %d of %d", wrong, len(d.RacyTotals), fixedRight, len(d.FixedTotals))
	if long := d.LongGoroutines * d.LongIncrements; wrong < len(d.RacyTotals) && len(d.LongTotals) > 0 && medianInt(d.LongTotals) < long {
		reason += fmt.Sprintf(" (its goroutines rarely overlap here; %d goroutines x %s increments lost %s)",
			d.LongGoroutines, commas(d.LongIncrements), percentOf(long-medianInt(d.LongTotals), long))
	}
	if d.DetectorRacy == nil {
		reason += "; race detector " + d.Detector
	}
	if len(problems) > 0 {
		reason += "; " + strings.Join(problems, "; ")
	}
	return lab.Judge(asArticles, coordOK, reason)
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = commas(x)
	}
	return strings.Join(parts, ", ")
}

func medianInt(xs []int) int { return int(lab.Summarize(lab.Floats(xs)).Median) }

func countEqual(xs []int, want int) int {
	n := 0
	for _, x := range xs {
		if x == want {
			n++
		}
	}
	return n
}

func distinct(xs []int) int {
	s := slices.Clone(xs)
	slices.Sort(s)
	return len(slices.Compact(s))
}

func percentOf(part, whole int) string {
	if whole == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(part)/float64(whole))
}

func silentOr(races int) string {
	if races == 0 {
		return "silent"
	}
	return fmt.Sprintf("%d DATA RACE", races)
}

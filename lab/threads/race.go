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

	// The scaled measurement: one goroutine per core (at least two), each
	// counting for tens of milliseconds, all started together. It runs
	// scaledRunsMin times, and on up to scaledRunsMax while no run has lost
	// an update: a busy machine may not give two cores at once for a while.
	scaledIncrements = 50_000_000
	scaledRunsMin    = 10
	scaledRunsMax    = 30
)

var raceExperiment = lab.Experiment{
	Name:     "race",
	Rung:     lab.Threads,
	Short:    "1000 goroutines x 1000 unsynchronised increments, and what -race says",
	Shows:    "counter++ unguarded",
	Articles: "never a million, different every run, a narrow band; -race points at counter++",
	Figure:   "never 1,000,000",
	Help: `A thousand goroutines each add 1 to a shared counter a thousand times. The
articles' version does counter++ with no synchronisation; counter++ is a load,
an add and a store, and increments from two goroutines running at once
overwrite each other. coord's column is the fixed counter (value and mutex in
one struct).

The lab runs both --trials times as the articles wrote them and reports the
racy totals' minimum, median and maximum and how wide the band is. Then it
runs the same racy counter sized to show on a machine with few cores: one
goroutine per core, each counting 50,000,000 times, started together, at
least 10 runs, with the CPU they got. Last it builds the program
with -race (go build -race, in a subprocess; needs the go toolchain, and says
so when it is missing) and reports what the race detector prints for each
version. The verdict rests on what is reliable: the race detector's report
and the lost updates of the sized runs.

--procs sets the number of goroutines of the articles' version (default 1000).

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

	// Scaled is the racy counter sized to lose updates on few cores.
	Scaled scaledRace `json:"scaled"`

	// GOARCH, NumCPU, GOMAXPROCS and LoadAverage (when the counting ended)
	// describe the machine: the race's size depends on all four.
	GOARCH      string  `json:"goarch"`
	NumCPU      int     `json:"num_cpu"`
	GOMAXPROCS  int     `json:"gomaxprocs"`
	LoadAverage float64 `json:"load_average"`

	// Detector is "ran", or why the race detector could not be run.
	Detector      string      `json:"detector"`
	DetectorRacy  *raceReport `json:"detector_racy,omitempty"`
	DetectorFixed *raceReport `json:"detector_fixed,omitempty"`
}

// scaledRace is the racy counter with one goroutine per core, each counting
// long enough to overlap with the others: the evidence of lost updates on a
// machine where the articles' one-microsecond goroutines seldom overlap.
type scaledRace struct {
	Goroutines int   `json:"goroutines"`
	Increments int   `json:"increments"`
	Totals     []int `json:"totals"`

	// Cores holds, per run, the CPU seconds the counting goroutines used
	// between them per second of wall time: Goroutines when the machine ran
	// every one throughout, less when other work held the cores.
	Cores []float64 `json:"cores"`
}

func (s scaledRace) expected() int { return s.Goroutines * s.Increments }

// lostRuns returns how many runs lost at least one update.
func (s scaledRace) lostRuns() int {
	return len(s.Totals) - countEqual(s.Totals, s.expected())
}

// coresWorth says how many cores' worth of CPU the sized goroutines got
// between them, or that it was not measured: only Linux reports one thread's
// CPU time, and elsewhere a 0 would read as "no CPU at all".
func coresWorth(median float64, goroutines int) string {
	if !threadCPUMeasured {
		return "not measured on " + runtime.GOOS + " (only Linux reports a thread's CPU time)"
	}
	return fmt.Sprintf("median %.2f cores' worth (%d would be every core throughout)", median, goroutines)
}

// lossPercents returns each run's lost updates as a percentage.
func (s scaledRace) lossPercents() []float64 {
	out := make([]float64, len(s.Totals))
	for i, total := range s.Totals {
		out[i] = 100 * float64(s.expected()-total) / float64(s.expected())
	}
	return out
}

func runRace(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	d := raceData{Goroutines: env.Procs, Increments: incrementsPerGoroutine, Expected: env.Procs * incrementsPerGoroutine,
		GOARCH: runtime.GOARCH, NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0)}
	env.Progress.Start("race", 2*env.Trials+scaledRunsMin+2)
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
	d.Scaled = scaledRace{Goroutines: max(2, d.GOMAXPROCS), Increments: scaledIncrements}
	for run := 0; run < scaledRunsMin || (run < scaledRunsMax && d.Scaled.lostRuns() == 0); run++ {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		total, cores := racyCountParallel(d.Scaled.Goroutines, d.Scaled.Increments)
		d.Scaled.Totals = append(d.Scaled.Totals, total)
		d.Scaled.Cores = append(d.Scaled.Cores, cores)
		if run < scaledRunsMin {
			env.Progress.Step()
		}
	}
	d.LoadAverage = lab.LoadAverage()
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
	exact := countEqual(d.RacyTotals, d.Expected)
	losses := lab.Summarize(d.Scaled.lossPercents())
	res.Original = fmt.Sprintf("%s x %s as written: exact in %d/%d runs, min %s (band %s); %d x %s started together: lost updates in %d/%d runs, up to %.1f%%",
		commas(d.Goroutines), commas(d.Increments), exact, len(d.RacyTotals), commas(int(d.Racy.Min)), percentOf(band, d.Expected),
		d.Scaled.Goroutines, commas(d.Scaled.Increments), d.Scaled.lostRuns(), len(d.Scaled.Totals), losses.Max)
	res.Coord = fmt.Sprintf("%s in %d/%d runs", commas(d.Expected), countEqual(d.FixedTotals, d.Expected), len(d.FixedTotals))
	switch {
	case d.DetectorRacy != nil:
		res.Original += fmt.Sprintf("; -race: %d DATA RACE", d.DetectorRacy.Races)
		res.Coord += fmt.Sprintf("; -race: %s", silentOr(d.DetectorFixed.Races))
	default:
		res.Original += "; -race not run"
		res.Coord += "; -race not run"
	}
	res.Row.Original = fmt.Sprintf("exact %d/%d", len(d.Scaled.Totals), len(d.Scaled.Totals))
	if lost := d.Scaled.lostRuns(); lost > 0 {
		res.Row.Original = fmt.Sprintf("lost in %d/%d", lost, len(d.Scaled.Totals))
	}
	res.Row.Coord = fmt.Sprintf("%s %d/%d", commas(d.Expected), countEqual(d.FixedTotals, d.Expected), len(d.FixedTotals))

	res.AddDetail("workload", "%s goroutines x %s increments, %d runs each", commas(d.Goroutines), commas(d.Increments), len(d.RacyTotals))
	res.AddDetail("racy totals", "min %s, median %s, max %s; %d of %d runs wrong, %d distinct totals",
		commas(int(d.Racy.Min)), commas(int(d.Racy.Median)), commas(int(d.Racy.Max)),
		len(d.RacyTotals)-exact, len(d.RacyTotals), distinct(d.RacyTotals))
	res.AddDetail("band", "%s wide, %s of the right answer (the articles: much narrower than pure randomness would suggest)",
		commas(band), percentOf(band, d.Expected))
	res.AddDetail("lost updates", "median %s per run (%s)", commas(d.Expected-int(d.Racy.Median)), percentOf(d.Expected-int(d.Racy.Median), d.Expected))
	cores := lab.Summarize(d.Scaled.Cores)
	res.AddDetail("sized for 2 cores", "%d goroutines x %s increments, one per core, started together: lost updates in %d of %d runs, loss min %.1f%%, median %.1f%%, max %.1f%%; CPU the goroutines got between them: %s",
		d.Scaled.Goroutines, commas(d.Scaled.Increments), d.Scaled.lostRuns(), len(d.Scaled.Totals), losses.Min, losses.Median, losses.Max, coresWorth(cores.Median, d.Scaled.Goroutines))
	res.AddDetail("machine", "%s, %d CPUs, GOMAXPROCS %d, load average %.1f", d.GOARCH, d.NumCPU, d.GOMAXPROCS, d.LoadAverage)
	if d.DetectorRacy != nil {
		res.AddDetail("-race, racy", "%d DATA RACE report(s), exit status %d, total %s: %s",
			d.DetectorRacy.Races, d.DetectorRacy.ExitCode, commas(d.DetectorRacy.Total), d.DetectorRacy.First)
		res.AddDetail("-race, fixed", "%s, exit status %d, total %s", silentOr(d.DetectorFixed.Races), d.DetectorFixed.ExitCode, commas(d.DetectorFixed.Total))
	} else {
		res.AddDetail("race detector", "%s", d.Detector)
	}
	res.Charts = []lab.Chart{{
		Name: "lost", Title: "race: updates lost per run", XLabel: "run", YLabel: "lost updates (% of the right total)",
		Kind: lab.Trials,
		Series: []lab.Series{
			{Label: fmt.Sprintf("articles: counter++, %s x %s", commas(d.Goroutines), commas(d.Increments)), Values: lossPercents(d.RacyTotals, d.Expected)},
			{Label: fmt.Sprintf("articles: counter++, %d x %s together", d.Scaled.Goroutines, commas(d.Scaled.Increments)), Values: d.Scaled.lossPercents()},
			{Label: fmt.Sprintf("coord: value and mutex in one struct, %s x %s", commas(d.Goroutines), commas(d.Increments)), Values: lossPercents(d.FixedTotals, d.Expected)},
		},
	}}
	return res
}

// lossPercents returns how far below want each total fell, in percent.
func lossPercents(totals []int, want int) []float64 {
	out := make([]float64, len(totals))
	for i, total := range totals {
		out[i] = 100 * float64(want-total) / float64(want)
	}
	return out
}

// judgeRace rests on what shows reliably on any machine: the race detector
// reports the racy counter (when the toolchain is here to run it) and the
// sized runs lose updates. Whether the articles' own 1000 x 1000 loses any
// depends on how many cores run its one-microsecond goroutines at once; the
// reason says how it went and why. coord's counter must be right in every
// run, with the detector silent.
func judgeRace(d raceData) lab.Verdict {
	fixedRight := countEqual(d.FixedTotals, d.Expected)
	coordOK := len(d.FixedTotals) > 0 && fixedRight == len(d.FixedTotals)
	lost := d.Scaled.lostRuns()
	asArticles := lost > 0
	var parts []string
	switch {
	case d.DetectorRacy == nil:
		parts = append(parts, "race detector "+d.Detector)
	case d.DetectorRacy.Races > 0:
		parts = append(parts, "-race reported the racy counter")
	default:
		asArticles = false
		parts = append(parts, "-race reported nothing for the racy counter")
	}
	if d.DetectorFixed != nil && (d.DetectorFixed.Races > 0 || d.DetectorFixed.Total != d.Expected) {
		coordOK = false
		parts = append(parts, fmt.Sprintf("-race reported %d race(s) in the fixed counter", d.DetectorFixed.Races))
	}
	losses := lab.Summarize(d.Scaled.lossPercents())
	parts = append(parts, fmt.Sprintf("%d goroutines x %s increments, started together, lost updates in %d of %d runs (up to %.1f%% of the total)",
		d.Scaled.Goroutines, commas(d.Scaled.Increments), lost, len(d.Scaled.Totals), losses.Max))
	if lost == 0 {
		parts = append(parts, fmt.Sprintf("CPU they got between them: %s; this machine (load %.1f on %d CPUs, GOMAXPROCS %d) did not run them together",
			coresWorth(lab.Summarize(d.Scaled.Cores).Median, d.Scaled.Goroutines), d.LoadAverage, d.NumCPU, d.GOMAXPROCS))
	}
	parts = append(parts, fmt.Sprintf("the fixed counter was right in %d of %d", fixedRight, len(d.FixedTotals)))
	if exact := countEqual(d.RacyTotals, d.Expected); exact > 0 {
		parts = append(parts, fmt.Sprintf("the articles' own %s x %s came out exact in %d of %d runs: %s",
			commas(d.Goroutines), commas(d.Increments), exact, len(d.RacyTotals), whyFewerLosses(d)))
	}
	return lab.Judge(asArticles, coordOK, strings.Join(parts, "; "))
}

// whyFewerLosses explains why the articles' own program loses fewer updates
// here than on the machine the articles ran on (an M-series Mac: arm64, eight
// cores or more).
func whyFewerLosses(d raceData) string {
	instruction := "counter++ is a load, an add and a store here too"
	if d.GOARCH == "amd64" || d.GOARCH == "386" {
		instruction = "Go compiles counter++ to one instruction here (INCQ, not atomic, but with a window of a few cycles)"
	}
	return fmt.Sprintf("each goroutine is done in about a microsecond, so on %d busy cores two seldom count at the same instant, and %s; "+
		"the articles ran on an M-series Mac, with eight or more cores counting at once and counter++ compiled to three arm64 instructions (load, add, store)",
		d.NumCPU, instruction)
}

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

package threads

import (
	"context"
	"fmt"
	"time"

	"coord/lab"
)

var mutexExperiment = lab.Experiment{
	Name:     "mutex",
	Rung:     lab.Threads,
	Short:    "the counter with its value and mutex in one struct",
	Shows:    "mutex in one struct",
	Articles: "1,000,000 every time; -race silent",
	Figure:   "right every run",
	Help: `The race experiment's counter made correct: the articles wrap the value and
the mutex that guards it in one struct, which writes down what the lock
protects. coord's column does the same job with one atomic add per increment
(sync/atomic), asking the CPU for the atomicity instead of a lock.

The lab runs both --trials times with 1000 goroutines x 1000 increments
(--procs sets the goroutines), times each run, and builds the articles' version
with -race to check that the race detector is silent (needs the go toolchain).

Predict before running: a million every time, certainly. Which is faster, a
million lock/unlock pairs or a million atomic adds, and by how much?`,
	Quick: lab.Params{Trials: 10, Procs: 1000},
	Full:  lab.Params{Trials: 30, Procs: 1000},
	Run:   runMutex,
}

// mutexData is what the mutex experiment measured.
type mutexData struct {
	Goroutines    int       `json:"goroutines"`
	Increments    int       `json:"increments"`
	Expected      int       `json:"expected"`
	MutexTotals   []int     `json:"mutex_totals"`
	MutexSeconds  []float64 `json:"mutex_seconds"`
	AtomicTotals  []int     `json:"atomic_totals"`
	AtomicSeconds []float64 `json:"atomic_seconds"`

	// Detector is "ran", or why the race detector could not be run.
	Detector      string      `json:"detector"`
	DetectorMutex *raceReport `json:"detector_mutex,omitempty"`
}

func runMutex(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	d := mutexData{Goroutines: env.Procs, Increments: incrementsPerGoroutine, Expected: env.Procs * incrementsPerGoroutine}
	env.Progress.Start("mutex", 2*env.Trials+2)
	for range env.Trials {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		start := time.Now()
		d.MutexTotals = append(d.MutexTotals, mutexCount(d.Goroutines, d.Increments))
		d.MutexSeconds = append(d.MutexSeconds, time.Since(start).Seconds())
		env.Progress.Step()
		start = time.Now()
		d.AtomicTotals = append(d.AtomicTotals, atomicCount(d.Goroutines, d.Increments))
		d.AtomicSeconds = append(d.AtomicSeconds, time.Since(start).Seconds())
		env.Progress.Step()
	}
	d.Detector = "ran"
	bin, err := buildProgram(ctx, env.Dir, "counter", true)
	env.Progress.Step()
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		env.Logger.Warn("race detector not run", "err", err)
		d.Detector = "not run: " + err.Error()
	default:
		rep, err := runRaceCounter(ctx, bin, "mutex", d.Goroutines, d.Increments)
		if err != nil {
			return nil, err
		}
		d.DetectorMutex = &rep
	}
	env.Progress.Step()
	return mutexResult(d), nil
}

func mutexResult(d mutexData) *lab.Result {
	res := &lab.Result{Data: d, Verdict: judgeMutex(d)}
	mutexTime := lab.Summarize(d.MutexSeconds)
	atomicTime := lab.Summarize(d.AtomicSeconds)
	res.Original = fmt.Sprintf("%s in %d/%d runs, median %s",
		commas(d.Expected), countEqual(d.MutexTotals, d.Expected), len(d.MutexTotals), millis(mutexTime.Median))
	if d.DetectorMutex != nil {
		res.Original += "; -race " + silentOr(d.DetectorMutex.Races)
	} else {
		res.Original += "; -race not run"
	}
	res.Coord = fmt.Sprintf("atomic add: %s in %d/%d runs, median %s",
		commas(d.Expected), countEqual(d.AtomicTotals, d.Expected), len(d.AtomicTotals), millis(atomicTime.Median))
	res.Row.Original = fmt.Sprintf("%s %d/%d", commas(d.Expected), countEqual(d.MutexTotals, d.Expected), len(d.MutexTotals))
	res.Row.Coord = fmt.Sprintf("atomic %d/%d", countEqual(d.AtomicTotals, d.Expected), len(d.AtomicTotals))
	res.AddDetail("workload", "%s goroutines x %s increments, %d runs each", commas(d.Goroutines), commas(d.Increments), len(d.MutexTotals))
	res.AddDetail("mutex per increment", "min %s, median %s, max %s per run",
		millis(mutexTime.Min), millis(mutexTime.Median), millis(mutexTime.Max))
	res.AddDetail("atomic per increment", "min %s, median %s, max %s per run",
		millis(atomicTime.Min), millis(atomicTime.Median), millis(atomicTime.Max))
	if atomicTime.Median > 0 {
		res.AddDetail("mutex / atomic", "%.1fx", mutexTime.Median/atomicTime.Median)
	}
	if d.DetectorMutex != nil {
		res.AddDetail("-race, mutex", "%s, exit status %d, total %s", silentOr(d.DetectorMutex.Races), d.DetectorMutex.ExitCode, commas(d.DetectorMutex.Total))
	} else {
		res.AddDetail("race detector", "%s", d.Detector)
	}
	res.Charts = []lab.Chart{{
		Name: "time", Title: "mutex: time per run", XLabel: "run", YLabel: "seconds",
		Kind: lab.Trials,
		Series: []lab.Series{
			{Label: "articles: value and mutex in one struct", Values: d.MutexSeconds},
			{Label: "coord: atomic add", Values: d.AtomicSeconds},
		},
	}}
	return res
}

// judgeMutex: the articles' struct gives the right total every run with the
// detector silent; so does coord's atomic counter.
func judgeMutex(d mutexData) lab.Verdict {
	mutexRight := countEqual(d.MutexTotals, d.Expected)
	atomicRight := countEqual(d.AtomicTotals, d.Expected)
	asArticles := len(d.MutexTotals) > 0 && mutexRight == len(d.MutexTotals)
	coordOK := len(d.AtomicTotals) > 0 && atomicRight == len(d.AtomicTotals)
	reason := fmt.Sprintf("the mutex counter was right in %d of %d runs, the atomic one in %d of %d", mutexRight, len(d.MutexTotals), atomicRight, len(d.AtomicTotals))
	switch {
	case d.DetectorMutex == nil:
		reason += "; race detector " + d.Detector
	case d.DetectorMutex.Races > 0 || d.DetectorMutex.Total != d.Expected:
		asArticles = false
		reason += fmt.Sprintf("; -race reported %d race(s), total %s", d.DetectorMutex.Races, commas(d.DetectorMutex.Total))
	default:
		reason += "; -race silent"
	}
	return lab.Judge(asArticles, coordOK, reason)
}

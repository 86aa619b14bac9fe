package threads

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"coord/lab"
)

var granularityExperiment = lab.Experiment{
	Name:     "granularity",
	Rung:     lab.Threads,
	Short:    "a lock per increment against a lock around the loop, timed",
	Shows:    "lock per op or loop",
	Articles: "the coarse lock wins by 60-90x",
	Figure:   "coarse 60-90x",
	Help: `The mutex counter timed twice: once taking the lock per increment, as the
usual advice (hold locks briefly) recommends, and once taking it around each
goroutine's whole loop. The articles' column is the per-increment lock; coord's
is the coarse one. Both must total 1,000,000.

The lab times both --trials times with 1000 goroutines x 1000 increments
(--procs sets the goroutines), alternating which goes first, and reports the
medians, their ratio and GOMAXPROCS: the ratio depends on how many cores can
run goroutines at once, and the articles measured theirs on an M-series Mac.

Predict before running: the fine lock lets goroutines interleave, so should it
not win? There is no parallelism to gain here: each goroutine only increments
one shared counter. What do a million lock/unlock pairs cost against a
thousand?`,
	Quick: lab.Params{Trials: 5, Procs: 1000},
	Full:  lab.Params{Trials: 30, Procs: 1000},
	Run:   runGranularity,
}

// granularityData is what the granularity experiment measured.
type granularityData struct {
	GOMAXPROCS    int       `json:"gomaxprocs"`
	NumCPU        int       `json:"num_cpu"`
	Goroutines    int       `json:"goroutines"`
	Increments    int       `json:"increments"`
	Expected      int       `json:"expected"`
	FineSeconds   []float64 `json:"fine_seconds"`
	CoarseSeconds []float64 `json:"coarse_seconds"`
	FineTotals    []int     `json:"fine_totals"`
	CoarseTotals  []int     `json:"coarse_totals"`

	// Ratio is the median fine time over the median coarse time.
	Ratio float64 `json:"ratio"`
}

// ratioReproducedMin is the smallest ratio that counts as the articles'
// result: the coarse lock winning by an order of magnitude. The articles'
// 60-90x was measured on a many-core Mac; the exact figure depends on the
// machine, the direction and the order of magnitude should not.
const ratioReproducedMin = 10

func runGranularity(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	d := granularityData{
		GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
		Goroutines: env.Procs, Increments: incrementsPerGoroutine, Expected: env.Procs * incrementsPerGoroutine,
	}
	env.Progress.Start("granularity", env.Trials)
	fine := func() {
		start := time.Now()
		d.FineTotals = append(d.FineTotals, mutexCount(d.Goroutines, d.Increments))
		d.FineSeconds = append(d.FineSeconds, time.Since(start).Seconds())
	}
	coarse := func() {
		start := time.Now()
		d.CoarseTotals = append(d.CoarseTotals, coarseCount(d.Goroutines, d.Increments))
		d.CoarseSeconds = append(d.CoarseSeconds, time.Since(start).Seconds())
	}
	for i := range env.Trials {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// Alternate the order so that neither variant always runs on a
		// warm (or a freshly collected) heap.
		if i%2 == 0 {
			fine()
			coarse()
		} else {
			coarse()
			fine()
		}
		env.Progress.Step()
	}
	if m := lab.Summarize(d.CoarseSeconds).Median; m > 0 {
		d.Ratio = lab.Summarize(d.FineSeconds).Median / m
	}
	return granularityResult(d), nil
}

func granularityResult(d granularityData) *lab.Result {
	fine, coarse := lab.Summarize(d.FineSeconds), lab.Summarize(d.CoarseSeconds)
	res := &lab.Result{Data: d, Verdict: judgeGranularity(d)}
	res.Original = fmt.Sprintf("lock per increment: median %s", millis(fine.Median))
	res.Coord = fmt.Sprintf("lock per loop: median %s, %.0fx faster (GOMAXPROCS %d)", millis(coarse.Median), d.Ratio, d.GOMAXPROCS)
	res.Row.Original = "per op " + millis(fine.Median)
	res.Row.Coord = fmt.Sprintf("%.0fx faster", d.Ratio)
	res.AddDetail("machine", "GOMAXPROCS %d, %d CPUs", d.GOMAXPROCS, d.NumCPU)
	res.AddDetail("workload", "%s goroutines x %s increments, %d runs each", commas(d.Goroutines), commas(d.Increments), len(d.FineSeconds))
	res.AddDetail("lock per increment", "min %s, median %s, max %s (%s lock/unlock pairs)",
		millis(fine.Min), millis(fine.Median), millis(fine.Max), commas(d.Expected))
	res.AddDetail("lock per loop", "min %s, median %s, max %s (%s lock/unlock pairs)",
		millis(coarse.Min), millis(coarse.Median), millis(coarse.Max), commas(d.Goroutines))
	res.AddDetail("ratio", "%.1fx (articles: 60-90x on an M-series Mac)", d.Ratio)
	res.Charts = []lab.Chart{{
		Name: "time", Title: fmt.Sprintf("granularity: time per run (GOMAXPROCS %d)", d.GOMAXPROCS),
		XLabel: "run", YLabel: "seconds", Kind: lab.Trials,
		Series: []lab.Series{
			{Label: "articles' advice: lock per increment", Values: d.FineSeconds},
			{Label: "coord: lock around the loop", Values: d.CoarseSeconds},
		},
	}}
	return res
}

// judgeGranularity: both must count right; the articles' finding holds when
// the coarse lock wins by at least ratioReproducedMin.
func judgeGranularity(d granularityData) lab.Verdict {
	right := countEqual(d.FineTotals, d.Expected) + countEqual(d.CoarseTotals, d.Expected)
	all := len(d.FineTotals) + len(d.CoarseTotals)
	coordOK := all > 0 && right == all
	reason := fmt.Sprintf("the coarse lock was %.1fx faster with GOMAXPROCS %d (articles: 60-90x; reproduced means at least %dx)", d.Ratio, d.GOMAXPROCS, ratioReproducedMin)
	if !coordOK {
		reason += fmt.Sprintf("; only %d of %d runs totalled %s", right, all, commas(d.Expected))
	}
	return lab.Judge(d.Ratio >= ratioReproducedMin, coordOK, reason)
}

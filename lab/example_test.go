package lab_test

import (
	"context"
	"fmt"
	"sync"

	"coord/lab"
)

// An experiment joins the lab with one Register call, usually from an init
// function of its rung's package. Run measures the original and coord's
// version and judges them; the runner fills in the rest of the result.
func Example() {
	lab.Register(lab.Experiment{
		Name:     "waitgroup-demo",
		Rung:     lab.Threads,
		Short:    "a WaitGroup counts every goroutine",
		Help:     "What it shows, and what to predict before running it.",
		Shows:    "WaitGroup waits",
		Articles: "every goroutine is waited for",
		Figure:   "all waited for",
		Quick:    lab.Params{Trials: 3, Procs: 4},
		Full:     lab.Params{Trials: 30, Procs: 100},
		Run: func(ctx context.Context, env *lab.Env) (*lab.Result, error) {
			done := 0
			for range env.Trials {
				var mu sync.Mutex
				var wg sync.WaitGroup
				finished := 0
				for range env.Procs {
					wg.Go(func() {
						mu.Lock()
						finished++
						mu.Unlock()
					})
				}
				wg.Wait()
				if finished == env.Procs {
					done++
				}
			}
			res := &lab.Result{
				Original: fmt.Sprintf("%d/%d trials complete", done, env.Trials),
				Coord:    fmt.Sprintf("%d/%d trials complete", done, env.Trials),
				// The summary table's cells: at most lab.CellMax characters.
				Row: lab.Row{Original: fmt.Sprintf("done %d/%d", done, env.Trials), Coord: fmt.Sprintf("done %d/%d", done, env.Trials)},
			}
			res.Verdict = lab.Judge(done == env.Trials, done == env.Trials, "every goroutine finished before Wait returned")
			return res, nil
		},
	})
	e, _ := lab.Lookup("waitgroup-demo")
	r := lab.Run(context.Background(), e, lab.Config{Quick: true, Seed: 1})
	fmt.Println(r.Experiment, r.Rung, r.Params.Trials, r.Original, r.Verdict.Outcome)
	// Output: waitgroup-demo threads 3 3/3 trials complete reproduced
}

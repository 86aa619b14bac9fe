package threads

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"coord/lab"
)

var deadlockExperiment = lab.Experiment{
	Name:     "deadlock",
	Rung:     lab.Threads,
	Short:    "lock-order inversion, and how often it hides without the Sleep",
	Shows:    "lock-order deadlock",
	Articles: "Go reports all goroutines asleep; without the Sleep the bug hides",
	Figure:   "asleep; hides",
	Help: `Two goroutines take two mutexes in opposite order: one locks A then B, the
other B then A, with a short Sleep between the two acquisitions. Each ends up
holding the lock the other wants: a circular wait neither can leave.

The articles' version runs in a child process (so the deadlock cannot take the
lab down) and the lab reports what the Go runtime prints. Then it deletes the
Sleep, as the articles suggest, and runs that version --trials times, each in
its own process, counting how often the bug hides (the run completes) and how
often it bites. coord's column takes the locks in one global order (A before
B, in both goroutines), keeps the Sleep, and runs --trials times.

Predict before running: with the Sleep, does it deadlock every time? Without
it, out of 20 runs, how many deadlock? What would a test suite that runs it
once conclude?`,
	Quick: lab.Params{Trials: 20},
	Full:  lab.Params{Trials: 200},
	Run:   runDeadlock,
}

const (
	childDeadlock = "threads/deadlock"
	// betweenLocks is the Sleep between the two acquisitions: long enough
	// that both goroutines hold their first lock before either asks for
	// its second.
	betweenLocks = 20 * time.Millisecond

	variantSleep   = "inverted-sleep"
	variantNoSleep = "inverted-nosleep"
	variantOrdered = "ordered-sleep"
)

// lockPair runs the two goroutines. inverted makes the second take the locks
// in the opposite order; sleep is the pause between acquisitions.
func lockPair(inverted bool, sleep time.Duration) {
	var a, b sync.Mutex
	take := func(first, second *sync.Mutex) {
		first.Lock()
		if sleep > 0 {
			time.Sleep(sleep)
		}
		second.Lock()
		second.Unlock()
		first.Unlock()
	}
	var wg sync.WaitGroup
	wg.Go(func() { take(&a, &b) })
	if inverted {
		wg.Go(func() { take(&b, &a) })
	} else {
		wg.Go(func() { take(&a, &b) })
	}
	wg.Wait()
}

// deadlockChild runs one lock pair: args[0] names the variant. It prints
// "done" if the pair finishes.
func deadlockChild(args []string) int {
	if len(args) != 1 {
		fmt.Fprintf(os.Stderr, "usage: %s %s %s|%s|%s\n", lab.ChildArg, childDeadlock, variantSleep, variantNoSleep, variantOrdered)
		return 2
	}
	switch args[0] {
	case variantSleep:
		lockPair(true, betweenLocks)
	case variantNoSleep:
		lockPair(true, 0)
	case variantOrdered:
		lockPair(false, betweenLocks)
	default:
		fmt.Fprintf(os.Stderr, "%s: unknown variant %q\n", childDeadlock, args[0])
		return 2
	}
	fmt.Println("done")
	return 0
}

// deadlockData is what the deadlock experiment measured.
type deadlockData struct {
	// Harness says how the articles' program was run.
	Harness *harness `json:"harness"`

	// WithSleep holds the child runs of the articles' program.
	WithSleep []childRun `json:"with_sleep"`

	// NoSleep holds the child runs with the Sleep deleted.
	NoSleep []childRun `json:"no_sleep"`

	// OrderedDone counts coord's runs that finished; OrderedHung those
	// that did not within shutdownTimeout.
	OrderedDone int `json:"ordered_done"`
	OrderedHung int `json:"ordered_hung"`
}

func runDeadlock(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	var d deadlockData
	withSleep := min(env.Trials, 3)
	env.Progress.Start("deadlock", withSleep+2*env.Trials)
	var err error
	if d.Harness, err = newHarness(ctx, env, "deadlock", childDeadlock); err != nil {
		return nil, err
	}
	for range withSleep {
		run, err := d.Harness.run(ctx, env, variantSleep)
		if err != nil {
			return nil, err
		}
		d.WithSleep = append(d.WithSleep, run)
		env.Progress.Step()
	}
	for range env.Trials {
		run, err := d.Harness.run(ctx, env, variantNoSleep)
		if err != nil {
			return nil, err
		}
		d.NoSleep = append(d.NoSleep, run)
		env.Progress.Step()
	}
	for range env.Trials {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		done := make(chan struct{})
		go func() {
			lockPair(false, betweenLocks)
			close(done)
		}()
		select {
		case <-done:
			d.OrderedDone++
		case <-time.After(shutdownTimeout):
			d.OrderedHung++ // would be a bug in the ordered version; reported, not hidden
		}
		env.Progress.Step()
	}
	return deadlockResult(d), nil
}

func deadlockResult(d deadlockData) *lab.Result {
	res := &lab.Result{Data: d, Verdict: judgeDeadlock(d)}
	reported := countRuns(d.WithSleep, runtimeReported)
	hid := countRuns(d.NoSleep, childRun.Completed)
	res.Original = fmt.Sprintf("with Sleep: runtime deadlock in %d/%d; without: hid in %d/%d runs",
		reported, len(d.WithSleep), hid, len(d.NoSleep))
	res.Coord = fmt.Sprintf("one lock order: %d/%d runs finished", d.OrderedDone, d.OrderedDone+d.OrderedHung)
	res.Row.Original = fmt.Sprintf("%d/%d, hid %d/%d", reported, len(d.WithSleep), hid, len(d.NoSleep))
	res.Row.Coord = fmt.Sprintf("ordered %d/%d", d.OrderedDone, d.OrderedDone+d.OrderedHung)
	res.AddDetail("articles' program ran as", "%s", d.Harness.How)
	for i, r := range d.WithSleep {
		res.AddDetail(fmt.Sprintf("with Sleep, run %d", i+1), "%s", r.describe())
	}
	bit := countRuns(d.NoSleep, childRun.Deadlocked)
	res.AddDetail("without Sleep", "completed %d, deadlocked %d, other %d of %d runs", hid, bit, len(d.NoSleep)-hid-bit, len(d.NoSleep))
	res.AddDetail("one lock order", "%d runs finished, %d hung (Sleep %s kept)", d.OrderedDone, d.OrderedHung, betweenLocks)
	res.Charts = []lab.Chart{{
		Name: "outcomes", Title: "deadlock: runs that deadlocked", XLabel: "outcome", YLabel: "runs",
		Kind: lab.Bars, Categories: []string{"deadlocked", "completed"},
		Series: []lab.Series{
			{Label: "articles, with Sleep", Values: []float64{float64(countRuns(d.WithSleep, childRun.Deadlocked)), float64(countRuns(d.WithSleep, childRun.Completed))}},
			{Label: "articles, Sleep deleted", Values: []float64{float64(bit), float64(hid)}},
			{Label: "coord: one lock order", Values: []float64{float64(d.OrderedHung), float64(d.OrderedDone)}},
		},
	}}
	return res
}

// judgeDeadlock: with the Sleep the runtime reports the deadlock every time,
// and without it the bug hides in at least one run; coord's ordered version
// finishes every run.
func judgeDeadlock(d deadlockData) lab.Verdict {
	reported := countRuns(d.WithSleep, runtimeReported)
	hid := countRuns(d.NoSleep, childRun.Completed)
	asArticles := len(d.WithSleep) > 0 && reported == len(d.WithSleep) && hid > 0
	coordOK := d.OrderedDone > 0 && d.OrderedHung == 0
	reason := fmt.Sprintf("the runtime reported the inversion in %d of %d runs with the Sleep; without it the bug hid in %d of %d; one lock order finished %d of %d",
		reported, len(d.WithSleep), hid, len(d.NoSleep), d.OrderedDone, d.OrderedDone+d.OrderedHung)
	return lab.Judge(asArticles, coordOK, reason)
}

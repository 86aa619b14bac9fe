package threads

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"coord/lab"
)

var prodconsExperiment = lab.Experiment{
	Name:     "prodcons",
	Rung:     lab.Threads,
	Short:    "3 producers, 2 consumers, a bounded queue, and the shutdown",
	Shows:    "WaitGroup shutdown",
	Articles: "two WaitGroups shut down cleanly; one WaitGroup deadlocks",
	Figure:   "1 WG deadlocks",
	Help: `Three producers and two consumers share a bounded queue (a buffered channel
of 10). The work is easy; the shutdown is the experiment. Clean shutdown needs
two WaitGroups: wait for the producers, close the queue, then wait for the
consumers, who leave when the closed queue runs dry.

The articles' column collapses them into one WaitGroup, as the articles invite
the reader to do once: main waits for everybody before closing the queue, and
the consumers wait for the close. It runs in a child process (so it cannot take
the lab down) and the lab reports what the Go runtime prints when it notices.
coord's column runs the two-WaitGroup shutdown --trials times and checks that
every item arrives exactly once and every run ends.

Predict before running: who is waiting for whom in the one-WaitGroup version,
and will Go notice, or will the program just hang?`,
	Quick: lab.Params{Trials: 5},
	Full:  lab.Params{Trials: 30},
	Run:   runProdcons,
}

const (
	childProdcons     = "threads/prodcons"
	producers         = 3
	consumers         = 2
	queueSize         = 10
	itemsPerProducer  = 100
	shutdownTimeout   = 10 * time.Second
	prodconsOneWG     = "one-waitgroup"
	prodconsTwoGroups = "two-waitgroups"
)

// produceConsume runs the pipeline with the given shutdown and returns how
// many items the consumers took and their sum. With oneWaitGroup it never
// returns: that is the bug, and it runs only in a child process.
func produceConsume(oneWaitGroup bool) (count, sum int) {
	queue := make(chan int, queueSize)
	var mu sync.Mutex
	consume := func() {
		for item := range queue {
			mu.Lock()
			count++
			sum += item
			mu.Unlock()
		}
	}
	produce := func(p int) {
		for i := range itemsPerProducer {
			queue <- p*itemsPerProducer + i + 1
		}
	}
	if oneWaitGroup {
		// The articles' collapsed shutdown: one WaitGroup for everybody.
		// main waits for the consumers before closing the queue they are
		// waiting on.
		var wg sync.WaitGroup
		for p := range producers {
			wg.Go(func() { produce(p) })
		}
		for range consumers {
			wg.Go(consume)
		}
		wg.Wait()
		close(queue)
		return count, sum
	}
	var producing, consuming sync.WaitGroup
	for p := range producers {
		producing.Go(func() { produce(p) })
	}
	for range consumers {
		consuming.Go(consume)
	}
	producing.Wait()
	close(queue) // the producers are done: nothing else will be sent
	consuming.Wait()
	return count, sum
}

// expectedSum is the sum of all items, 1 to producers × itemsPerProducer.
func expectedSum() int {
	n := producers * itemsPerProducer
	return n * (n + 1) / 2
}

// prodconsChild runs one pipeline: args[0] is one-waitgroup or
// two-waitgroups. It prints the count and sum of what was consumed.
func prodconsChild(args []string) int {
	if len(args) != 1 || (args[0] != prodconsOneWG && args[0] != prodconsTwoGroups) {
		fmt.Fprintf(os.Stderr, "usage: %s %s %s|%s\n", lab.ChildArg, childProdcons, prodconsOneWG, prodconsTwoGroups)
		return 2
	}
	count, sum := produceConsume(args[0] == prodconsOneWG)
	fmt.Println(count, sum)
	return 0
}

// prodconsData is what the prodcons experiment measured.
type prodconsData struct {
	Items int `json:"items"`

	// Harness says how the collapsed shutdown was run.
	Harness *harness `json:"harness"`

	// OneWaitGroup holds the child runs of the collapsed shutdown.
	OneWaitGroup []childRun `json:"one_waitgroup"`

	// TwoCounts and TwoSums are what coord's shutdown consumed per run;
	// TwoSeconds how long each run took; TwoHung counts runs that did not
	// end within shutdownTimeout.
	TwoCounts  []int     `json:"two_counts"`
	TwoSums    []int     `json:"two_sums"`
	TwoSeconds []float64 `json:"two_seconds"`
	TwoHung    int       `json:"two_hung"`
}

func runProdcons(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	d := prodconsData{Items: producers * itemsPerProducer}
	originals := min(env.Trials, 3) // the deadlock is deterministic; a few runs show it
	env.Progress.Start("prodcons", originals+env.Trials)
	var err error
	if d.Harness, err = newHarness(ctx, env, "prodcons", childProdcons); err != nil {
		return nil, err
	}
	for range originals {
		run, err := d.Harness.run(ctx, env, prodconsOneWG)
		if err != nil {
			return nil, err
		}
		d.OneWaitGroup = append(d.OneWaitGroup, run)
		env.Progress.Step()
	}
	for range env.Trials {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		type outcome struct{ count, sum int }
		done := make(chan outcome, 1)
		start := time.Now()
		go func() {
			count, sum := produceConsume(false)
			done <- outcome{count, sum}
		}()
		select {
		case o := <-done:
			d.TwoCounts = append(d.TwoCounts, o.count)
			d.TwoSums = append(d.TwoSums, o.sum)
			d.TwoSeconds = append(d.TwoSeconds, time.Since(start).Seconds())
		case <-time.After(shutdownTimeout):
			// A hang here would be a bug in coord's shutdown; its
			// goroutines are abandoned, the lab goes on and says so.
			d.TwoHung++
		}
		env.Progress.Step()
	}
	return prodconsResult(d), nil
}

func prodconsResult(d prodconsData) *lab.Result {
	res := &lab.Result{Data: d, Verdict: judgeProdcons(d)}
	res.Original = fmt.Sprintf("one WaitGroup: deadlocked in %d/%d runs", countRuns(d.OneWaitGroup, childRun.Deadlocked), len(d.OneWaitGroup))
	if countRuns(d.OneWaitGroup, runtimeReported) > 0 {
		res.Original += ", runtime: \"all goroutines are asleep\""
	}
	clean := cleanRuns(d)
	res.Coord = fmt.Sprintf("two WaitGroups: %d/%d runs clean, %d items each", clean, len(d.TwoCounts)+d.TwoHung, d.Items)
	res.Row.Original = fmt.Sprintf("deadlock %d/%d", countRuns(d.OneWaitGroup, childRun.Deadlocked), len(d.OneWaitGroup))
	res.Row.Coord = fmt.Sprintf("clean %d/%d", clean, len(d.TwoCounts)+d.TwoHung)
	res.AddDetail("workload", "%d producers x %d items, %d consumers, queue of %d", producers, itemsPerProducer, consumers, queueSize)
	res.AddDetail("one WaitGroup ran as", "%s", d.Harness.How)
	for i, r := range d.OneWaitGroup {
		res.AddDetail("one WaitGroup, run "+strconv.Itoa(i+1), "%s", r.describe())
	}
	if len(d.TwoSeconds) > 0 {
		t := lab.Summarize(d.TwoSeconds)
		res.AddDetail("two WaitGroups", "%d of %d runs consumed every item once (sum %s) and exited; median %s",
			clean, len(d.TwoCounts)+d.TwoHung, commas(expectedSum()), millis(t.Median))
	}
	if d.TwoHung > 0 {
		res.AddDetail("two WaitGroups, hung", "%d runs did not finish within %s", d.TwoHung, shutdownTimeout)
	}
	return res
}

func cleanRuns(d prodconsData) int {
	clean := 0
	for i := range d.TwoCounts {
		if d.TwoCounts[i] == d.Items && d.TwoSums[i] == expectedSum() {
			clean++
		}
	}
	return clean
}

// judgeProdcons: the collapsed shutdown deadlocks in every run and the
// runtime says so; coord's shutdown delivers every item and ends every run.
func judgeProdcons(d prodconsData) lab.Verdict {
	reported := countRuns(d.OneWaitGroup, runtimeReported)
	clean := cleanRuns(d)
	runs := len(d.TwoCounts) + d.TwoHung
	asArticles := len(d.OneWaitGroup) > 0 && reported == len(d.OneWaitGroup)
	coordOK := runs > 0 && clean == runs
	reason := fmt.Sprintf("the runtime reported the one-WaitGroup deadlock in %d of %d runs; the two-WaitGroup shutdown was clean in %d of %d",
		reported, len(d.OneWaitGroup), clean, runs)
	return lab.Judge(asArticles, coordOK, reason)
}

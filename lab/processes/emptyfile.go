//go:build linux

package processes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"coord/lab"
	"coord/lab/articles"
	"coord/lease"
	"coord/lease/eventlog"
)

var emptyFileExperiment = lab.Experiment{
	Name:     "empty-file",
	Rung:     lab.Processes,
	Short:    "a zero-byte lock file before start: the wedge",
	Shows:    "zero-byte lock file",
	Articles: "never elects: every watcher loops on a file it can neither read nor recreate",
	Figure:   "never elects",
	Help: `A process that dies between creating the lock file and writing the lease into
it leaves an empty file. The lab creates that zero-byte file (as touch would)
before starting three processes against it, twice side by side:

  articles  the articles' lease program: a watcher that cannot parse the file
            tries O_EXCL, which fails because the file exists, and retries at
            the next tick, forever.
  coord     coord elect over the file backend, which decides from record
            files linked whole (never a partial file) and rewrites a damaged
            lock file, logging what it repaired.

The lab watches for a window of three and a half watch intervals and reports
who was elected, when, how many "could not read" retries the articles'
processes logged, and what coord said it repaired. Quick mode scales the
articles' timings down (lease 3 s, renew 1 s, watch 1 s); full mode uses 9/3/3.
--trials repeats it, --procs sets the processes per side.

Predict before running: after how many watch ticks does the articles' group
give up, or elect? What should coord do with a file it cannot read, and why
must it not simply delete it?`,
	Quick: lab.Params{Trials: 1, Procs: 3},
	Full:  lab.Params{Trials: 3, Procs: 3},
	Run:   runEmptyFile,
}

// articlesTimings returns the articles' lease timings: theirs in a full
// run, scaled down by three in quick mode, where the experiment is about
// what happens, not how long it takes.
func articlesTimings(quick bool) (leaseFor, renew, watch time.Duration) {
	if quick {
		return 3 * time.Second, time.Second, time.Second
	}
	return articles.LeaseDuration, articles.RenewInterval, articles.WatchInterval
}

func timingArgs(quick bool) []string {
	l, r, w := articlesTimings(quick)
	return []string{"--lease", l.String(), "--renew", r.String(), "--watch", w.String()}
}

// emptyTrial is one trial of both sides.
type emptyTrial struct {
	WindowSeconds float64 `json:"window_seconds"`
	// ArticlesElected counts elections among the articles' processes;
	// ArticlesUnreadable their "could not read lease file" retries.
	ArticlesElected    int `json:"articles_elected"`
	ArticlesUnreadable int `json:"articles_unreadable"`
	// CoordElected says whether coord elected a leader, CoordSeconds how long
	// after the processes were started.
	CoordElected bool    `json:"coord_elected"`
	CoordSeconds float64 `json:"coord_seconds"`
	// CoordRepairs are the problems coord's processes logged repairing.
	CoordRepairs []string `json:"coord_repairs"`
}

type emptyData struct {
	Procs  int          `json:"procs"`
	Trials []emptyTrial `json:"trials"`
}

func runEmptyFile(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	d := emptyData{Procs: env.Procs}
	env.Progress.Start("empty-file", env.Trials)
	for i := range env.Trials {
		t, err := emptyOnce(ctx, env, filepath.Join(env.Dir, "trial-"+strconv.Itoa(i)))
		if err != nil {
			return nil, err
		}
		d.Trials = append(d.Trials, t)
		env.Progress.Step()
	}
	return emptyResult(d), nil
}

func emptyOnce(ctx context.Context, env *lab.Env, dir string) (emptyTrial, error) {
	_, _, watch := articlesTimings(env.Quick)
	window := watch*7/2 + time.Second // a second for the processes to start
	t := emptyTrial{WindowSeconds: window.Seconds()}
	paths := map[string]string{}
	for _, side := range []string{implArticles, implCoord} {
		if err := os.MkdirAll(filepath.Join(dir, side), 0o755); err != nil {
			return t, err
		}
		paths[side] = filepath.Join(dir, side, "leader.lock")
		// The wedge: a lock file with nothing in it, as touch makes it.
		if err := os.WriteFile(paths[side], nil, 0o644); err != nil {
			return t, err
		}
	}
	groups := map[string]*group{implArticles: newGroup(), implCoord: newGroup()}
	defer groups[implArticles].stop()
	defer groups[implCoord].stop()
	started := eventlog.MonotonicNow()
	for p := range env.Procs {
		name := "p" + strconv.Itoa(p+1)
		art := append([]string{"articles", "lease", paths[implArticles], "--json"}, timingArgs(env.Quick)...)
		if err := groups[implArticles].start(name, env.Command(ctx, art...)); err != nil {
			return t, err
		}
		ttl, _, _ := articlesTimings(env.Quick)
		coord := []string{"elect", "--store", "file://" + paths[implCoord], "--id", name, "--json", "--ttl", ttl.String()}
		if err := groups[implCoord].start(name, env.Command(ctx, coord...)); err != nil {
			return t, err
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		elected, ok := groups[implCoord].waitEvent(ctx, window, isElected)
		if ok {
			t.CoordElected, t.CoordSeconds = true, monoSeconds(elected.MonoNS-started)
		}
	})
	// The articles' side is watched for the whole window: never electing
	// is the finding.
	sleep(ctx, window)
	wg.Wait()
	if ctx.Err() != nil {
		return t, ctx.Err()
	}
	for _, e := range groups[implArticles].snapshot() {
		switch e.Event.Event {
		case lease.EventElected:
			t.ArticlesElected++
		case articles.EventUnreadable:
			t.ArticlesUnreadable++
		}
	}
	for p := range env.Procs {
		t.CoordRepairs = append(t.CoordRepairs, repairs(groups[implCoord].stderr("p"+strconv.Itoa(p+1)))...)
	}
	return t, nil
}

var repairProblem = regexp.MustCompile(`problem=("(?:[^"\\]|\\.)*"|\S+)`)

// repairs extracts the problems a coord process logged repairing.
func repairs(stderr string) []string {
	var out []string
	for _, line := range strings.Split(stderr, "\n") {
		if !strings.Contains(line, "repairing lock file") {
			continue
		}
		problem := "unspecified"
		if m := repairProblem.FindStringSubmatch(line); m != nil {
			if unq, err := strconv.Unquote(m[1]); err == nil {
				problem = unq
			} else {
				problem = m[1]
			}
		}
		out = append(out, problem)
	}
	return out
}

func emptyResult(d emptyData) *lab.Result {
	res := &lab.Result{Data: d, Verdict: judgeEmptyFile(d)}
	var unreadable, coordElected int
	var coordTimes []float64
	var problems []string
	for _, t := range d.Trials {
		unreadable += t.ArticlesUnreadable
		if t.CoordElected {
			coordElected++
			coordTimes = append(coordTimes, t.CoordSeconds)
		}
		problems = append(problems, t.CoordRepairs...)
	}
	window := 0.0
	if len(d.Trials) > 0 {
		window = d.Trials[0].WindowSeconds
	}
	res.Original = fmt.Sprintf("no leader in %d/%d trials of %s; %d could-not-read retries", len(d.Trials)-countElected(d), len(d.Trials), secs(window), unreadable)
	res.Coord = fmt.Sprintf("elected in %d/%d trials, median %s after start", coordElected, len(d.Trials), secs(lab.Summarize(coordTimes).Median))
	res.Row.Original = fmt.Sprintf("elected %d/%d", countElected(d), len(d.Trials))
	res.Row.Coord = fmt.Sprintf("elected %d/%d", coordElected, len(d.Trials))
	if len(problems) > 0 {
		res.Coord += "; repaired: " + problems[0]
	}
	res.AddDetail("workload", "%d processes per side, a zero-byte lock file, watched for %s", d.Procs, secs(window))
	for i, t := range d.Trials {
		res.AddDetail("trial "+strconv.Itoa(i+1), "articles: %d elected, %d unreadable retries; coord: elected %v after %s, repairs %q",
			t.ArticlesElected, t.ArticlesUnreadable, t.CoordElected, secs(t.CoordSeconds), t.CoordRepairs)
	}
	return res
}

func countElected(d emptyData) int {
	n := 0
	for _, t := range d.Trials {
		if t.ArticlesElected > 0 {
			n++
		}
	}
	return n
}

// judgeEmptyFile: the articles' processes never elect and keep failing to
// read; coord elects in every trial and logs the repair.
func judgeEmptyFile(d emptyData) lab.Verdict {
	unreadable, coordOK := 0, len(d.Trials) > 0
	for _, t := range d.Trials {
		unreadable += t.ArticlesUnreadable
		if !t.CoordElected || len(t.CoordRepairs) == 0 {
			coordOK = false
		}
	}
	asArticles := len(d.Trials) > 0 && countElected(d) == 0 && unreadable > 0
	reason := fmt.Sprintf("the articles' processes elected in %d of %d trials (%d unreadable retries); coord ",
		countElected(d), len(d.Trials), unreadable)
	coordElected, repaired := 0, 0
	for _, t := range d.Trials {
		if t.CoordElected {
			coordElected++
		}
		if len(t.CoordRepairs) > 0 {
			repaired++
		}
	}
	reason += fmt.Sprintf("elected in %d and logged a repair in %d", coordElected, repaired)
	return lab.Judge(asArticles, coordOK, reason)
}

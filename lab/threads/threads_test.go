package threads

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"coord/lab"
)

func TestMain(m *testing.M) {
	lab.ServeChild()
	os.Exit(m.Run())
}

// runSmall runs an experiment at a small size, as `coord lab` would, with
// this test binary serving the lab children.
func runSmall(t *testing.T, name string, trials, procs int) *lab.Result {
	t.Helper()
	e, err := lab.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	r := lab.Run(context.Background(), e, lab.Config{Quick: true, Trials: trials, Procs: procs, Seed: 1})
	if r.Verdict.Outcome.Bad() {
		t.Fatalf("%s: %s: %s", name, r.Verdict.Outcome, r.Verdict.Reason)
	}
	if r.Original == "" || r.Coord == "" || r.Verdict.Reason == "" {
		t.Fatalf("%s: incomplete summary row %+v", name, r)
	}
	if err := r.Row.Validate(); err != nil {
		t.Errorf("%s: %v", name, err)
	}
	t.Logf("%s: original %q; coord %q; %s: %s", name, r.Original, r.Coord, r.Verdict.Outcome, r.Verdict.Reason)
	return r
}

func wantOutcome(t *testing.T, what string, v lab.Verdict, want lab.Outcome) {
	t.Helper()
	if v.Outcome != want {
		t.Errorf("%s: outcome %s (%s), want %s", what, v.Outcome, v.Reason, want)
	}
}

func repeat(x, n int) []int {
	xs := make([]int, n)
	for i := range xs {
		xs[i] = x
	}
	return xs
}

func TestRaceVerdict(t *testing.T) {
	broken := raceData{Expected: 100, RacyTotals: []int{90, 95, 97}, FixedTotals: repeat(100, 3), Detector: "ran",
		Scaled:       scaledRace{Goroutines: 2, Increments: 50, Totals: []int{100, 81, 77}, Cores: []float64{1, 1.6, 1.9}},
		DetectorRacy: &raceReport{Races: 2, Total: 93}, DetectorFixed: &raceReport{Races: 0, Total: 100},
		GOARCH: "amd64", NumCPU: 2, GOMAXPROCS: 2}
	wantOutcome(t, "detector reports it, sized runs lose updates, fixed right", judgeRace(broken), lab.Reproduced)

	// The articles' own shape seldom loses on two busy cores: the verdict
	// does not rest on it, and the reason says why it came out exact.
	lucky := broken
	lucky.RacyTotals = []int{100, 95, 100}
	v := judgeRace(lucky)
	wantOutcome(t, "the articles' shape exact in some runs", v, lab.Reproduced)
	for _, want := range []string{"exact in 2 of 3 runs", "INCQ", "M-series Mac", "lost updates in 2 of 3 runs"} {
		if !strings.Contains(v.Reason, want) {
			t.Errorf("reason %q lacks %q", v.Reason, want)
		}
	}
	if v := judgeRace(broken); strings.Contains(v.Reason, "M-series") {
		t.Errorf("reason %q explains an exact total that did not happen", v.Reason)
	}
	arm := lucky
	arm.GOARCH = "arm64"
	if v := judgeRace(arm); strings.Contains(v.Reason, "INCQ") || !strings.Contains(v.Reason, "a load, an add and a store here too") {
		t.Errorf("on arm64 the reason should not blame INCQ: %q", v.Reason)
	}

	noLoss := broken
	noLoss.Scaled.Totals = repeat(100, 3)
	noLoss.LoadAverage = 9
	v = judgeRace(noLoss)
	wantOutcome(t, "sized runs lost nothing", v, lab.Differs)
	if !strings.Contains(v.Reason, "did not run them together") || !strings.Contains(v.Reason, "load 9.0") {
		t.Errorf("reason %q does not say why nothing was lost", v.Reason)
	}

	silent := broken
	silent.DetectorRacy = &raceReport{Races: 0, Total: 90}
	wantOutcome(t, "detector silent on the racy counter", judgeRace(silent), lab.Differs)

	noTool := broken
	noTool.DetectorRacy, noTool.DetectorFixed, noTool.Detector = nil, nil, "not run: no go"
	v = judgeRace(noTool)
	wantOutcome(t, "no toolchain", v, lab.Reproduced)
	if !strings.Contains(v.Reason, "not run: no go") {
		t.Errorf("reason %q does not say the detector did not run", v.Reason)
	}

	wrongFix := broken
	wrongFix.FixedTotals = []int{100, 99, 100}
	wantOutcome(t, "fixed counter loses an update", judgeRace(wrongFix), lab.Failed)

	racyFix := broken
	racyFix.DetectorFixed = &raceReport{Races: 1, Total: 100}
	wantOutcome(t, "detector flags the fixed counter", judgeRace(racyFix), lab.Failed)
}

// TestRaceRowFits checks the race's summary cells against the table's limit
// at their widest: thirty runs, two-digit losses.
func TestRaceRowFits(t *testing.T) {
	d := raceData{Goroutines: 1000, Increments: 1000, Expected: 1_000_000,
		RacyTotals: repeat(966_518, 30), FixedTotals: repeat(1_000_000, 30), Detector: "not run: no go",
		Scaled: scaledRace{Goroutines: 2, Increments: 50, Totals: append(repeat(100, 29), 12), Cores: make([]float64, 30)}}
	for _, totals := range [][]int{repeat(12, 30), repeat(100, 30), append(repeat(100, 20), repeat(50, 10)...), repeat(99, 10)} {
		d.Scaled.Totals = totals
		r := raceResult(d)
		for _, cell := range []string{r.Row.Original, r.Row.Coord} {
			if n := len([]rune(cell)); n > lab.CellMax {
				t.Errorf("cell %q is %d characters, limit %d", cell, n, lab.CellMax)
			}
		}
	}
}

func TestRaceSmall(t *testing.T) {
	r := runSmall(t, "race", 3, 20)
	d := r.Data.(raceData)
	if len(d.RacyTotals) != 3 || len(d.FixedTotals) != 3 || d.Expected != 20*incrementsPerGoroutine {
		t.Fatalf("data = %+v", d)
	}
	for _, total := range d.RacyTotals {
		if total > d.Expected || total <= 0 {
			t.Errorf("racy total %d outside (0, %d]: an increment was invented", total, d.Expected)
		}
	}
	if _, err := goCommand(); err == nil {
		if d.DetectorRacy == nil || d.DetectorFixed == nil {
			t.Fatalf("go is installed but the detector did not run: %s", d.Detector)
		}
		if d.DetectorRacy.Races == 0 || d.DetectorRacy.ExitCode != 66 || !strings.Contains(d.DetectorRacy.First, "counter++") {
			t.Errorf("-race on the racy counter: %+v", d.DetectorRacy)
		}
		if d.DetectorFixed.Races != 0 || d.DetectorFixed.Total != d.Expected {
			t.Errorf("-race on the fixed counter: %+v", d.DetectorFixed)
		}
	}
}

func TestSummarizeRace(t *testing.T) {
	stderr := `==================
WARNING: DATA RACE
Read at 0x00c000012345 by goroutine 8:
  main.main.func1()
      /tmp/x/main.go:47 +0x44

Previous write at 0x00c000012345 by goroutine 7:
  main.main.func1()
      /tmp/x/main.go:47 +0x56
==================
`
	got := summarizeRace(stderr)
	want := "read by goroutine 8 at main.go:47 `counter++`, previous write by goroutine 7 at main.go:47 `counter++`"
	if got != want {
		t.Errorf("summarizeRace = %q\nwant %q", got, want)
	}
	if summarizeRace("all fine\n") != "" {
		t.Error("a summary of no race")
	}
}

func TestMutexVerdict(t *testing.T) {
	good := mutexData{Expected: 100, MutexTotals: repeat(100, 3), AtomicTotals: repeat(100, 3),
		DetectorMutex: &raceReport{Total: 100}, Detector: "ran"}
	wantOutcome(t, "both right, detector silent", judgeMutex(good), lab.Reproduced)
	broken := good
	broken.MutexTotals = []int{100, 98, 100}
	wantOutcome(t, "mutex counter wrong", judgeMutex(broken), lab.Differs)
	flagged := good
	flagged.DetectorMutex = &raceReport{Races: 1, Total: 100}
	wantOutcome(t, "detector flags the mutex counter", judgeMutex(flagged), lab.Differs)
	wrongCoord := good
	wrongCoord.AtomicTotals = []int{100, 100, 99}
	wantOutcome(t, "atomic counter wrong", judgeMutex(wrongCoord), lab.Failed)
}

func TestMutexSmall(t *testing.T) {
	r := runSmall(t, "mutex", 2, 10)
	wantOutcome(t, "small mutex run", r.Verdict, lab.Reproduced)
}

func TestGranularityVerdict(t *testing.T) {
	d := granularityData{Expected: 100, FineTotals: repeat(100, 2), CoarseTotals: repeat(100, 2), Ratio: 70, GOMAXPROCS: 8}
	wantOutcome(t, "coarse 70x faster", judgeGranularity(d), lab.Reproduced)
	d.Ratio = 2
	wantOutcome(t, "coarse only 2x faster", judgeGranularity(d), lab.Differs)
	d.Ratio = 70
	d.CoarseTotals = []int{100, 1}
	wantOutcome(t, "coarse counter wrong", judgeGranularity(d), lab.Failed)
}

func TestGranularitySmall(t *testing.T) {
	r := runSmall(t, "granularity", 2, 10)
	d := r.Data.(granularityData)
	if d.Ratio <= 0 || d.GOMAXPROCS < 1 || len(d.FineSeconds) != 2 {
		t.Errorf("data = %+v", d)
	}
}

func TestSemaphoreVerdict(t *testing.T) {
	full := []showing{{MaxInside: 2, MaxWaiting: 8}, {MaxInside: 2, MaxWaiting: 7}}
	d := semaphoreData{Seats: 2, Channel: full, Cond: full}
	wantOutcome(t, "both halls hold 2", judgeSemaphore(d), lab.Reproduced)
	d.Channel = []showing{{MaxInside: 3}}
	wantOutcome(t, "the channel let 3 in", judgeSemaphore(d), lab.Differs)
	d.Channel, d.Cond = full, []showing{{MaxInside: 3}}
	wantOutcome(t, "coord's hall let 3 in", judgeSemaphore(d), lab.Failed)
}

func TestSemaphoreHalls(t *testing.T) {
	for name, h := range map[string]hall{"channel": make(chanHall, hallSeats), "cond": newCondHall(hallSeats)} {
		if s := watch(h, 6, time.Millisecond); s.MaxInside > hallSeats || s.MaxInside < 1 {
			t.Errorf("%s hall: %d inside at once, want 1..%d", name, s.MaxInside, hallSeats)
		}
	}
	// The control proves the probe can see an overfull hall: with no
	// semaphore, the goroutines are released together and sleep while
	// inside, so more than the seats are in at once.
	if s := watch(openHall{}, 6, 20*time.Millisecond); s.MaxInside <= hallSeats {
		t.Errorf("open hall: only %d inside at once", s.MaxInside)
	}
}

func TestSemaphoreSmall(t *testing.T) {
	r := runSmall(t, "semaphore", 2, 6)
	wantOutcome(t, "small semaphore run", r.Verdict, lab.Reproduced)
}

func TestProdconsVerdict(t *testing.T) {
	deadlocked := childRun{ExitCode: 2, RuntimeDeadlock: true}
	d := prodconsData{Items: 300, OneWaitGroup: []childRun{deadlocked, deadlocked},
		TwoCounts: []int{300, 300}, TwoSums: []int{expectedSum(), expectedSum()}}
	wantOutcome(t, "one WaitGroup deadlocks, two shut down", judgeProdcons(d), lab.Reproduced)
	hung := d
	hung.OneWaitGroup = []childRun{{ExitCode: -1, Hung: true}}
	wantOutcome(t, "deadlock only seen as a hang", judgeProdcons(hung), lab.Differs)
	lost := d
	lost.TwoCounts = []int{300, 299}
	wantOutcome(t, "coord's shutdown lost an item", judgeProdcons(lost), lab.Failed)
	stuck := d
	stuck.TwoHung = 1
	wantOutcome(t, "coord's shutdown hung", judgeProdcons(stuck), lab.Failed)
}

func TestProdconsSmall(t *testing.T) {
	r := runSmall(t, "prodcons", 1, 0)
	d := r.Data.(prodconsData)
	if d.Harness.Detects {
		wantOutcome(t, "small prodcons run", r.Verdict, lab.Reproduced)
		if got := d.OneWaitGroup[0].Goroutines["chan receive"]; got != consumers {
			t.Errorf("goroutines in chan receive = %d, want the %d consumers (%v)", got, consumers, d.OneWaitGroup[0].Goroutines)
		}
	}
}

func TestDeadlockVerdict(t *testing.T) {
	caught := childRun{ExitCode: 2, RuntimeDeadlock: true}
	done := childRun{ExitCode: 0, Stdout: "done"}
	d := deadlockData{WithSleep: []childRun{caught}, NoSleep: []childRun{done, done, caught}, OrderedDone: 3}
	wantOutcome(t, "inversion caught, hides without Sleep", judgeDeadlock(d), lab.Reproduced)
	never := d
	never.NoSleep = []childRun{caught, caught}
	wantOutcome(t, "never hides", judgeDeadlock(never), lab.Differs)
	unreported := d
	unreported.WithSleep = []childRun{{ExitCode: -1, Hung: true}}
	wantOutcome(t, "runtime silent", judgeDeadlock(unreported), lab.Differs)
	stuck := d
	stuck.OrderedHung = 1
	wantOutcome(t, "ordered locks hung", judgeDeadlock(stuck), lab.Failed)
}

func TestDeadlockSmall(t *testing.T) {
	r := runSmall(t, "deadlock", 2, 0)
	d := r.Data.(deadlockData)
	if d.Harness.Detects {
		for _, run := range d.WithSleep {
			if !run.RuntimeDeadlock || run.Goroutines["sync.Mutex.Lock"] != 2 {
				t.Errorf("with Sleep: %+v, want the runtime's report and 2 goroutines in sync.Mutex.Lock", run)
			}
		}
	}
	if d.OrderedDone != 2 {
		t.Errorf("ordered runs finished: %d of 2", d.OrderedDone)
	}
}

// TestBlindHarness runs the deadlock as this test binary's own child. The
// binary is built with -race, which needs cgo, so the runtime cannot report
// the deadlock: the harness must catch it by its timeout and goroutine dump.
func TestBlindHarness(t *testing.T) {
	env := testEnv(t)
	h := &harness{child: childDeadlock, timeout: childTimeoutBlind}
	run, err := h.run(context.Background(), env, variantSleep)
	if err != nil {
		t.Fatal(err)
	}
	if !run.Deadlocked() || run.Completed() {
		t.Fatalf("run = %+v, want a deadlock", run)
	}
	if run.Hung && run.Goroutines["sync.Mutex.Lock"] != 2 {
		t.Errorf("goroutine dump states = %v, want 2 in sync.Mutex.Lock", run.Goroutines)
	}
	run, err = h.run(context.Background(), env, variantOrdered)
	if err != nil || !run.Completed() || run.Stdout != "done" {
		t.Fatalf("ordered child: %+v, %v", run, err)
	}
}

func testEnv(t *testing.T) *lab.Env {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &lab.Env{Binary: self, Dir: t.TempDir()}
}

func TestChildUsage(t *testing.T) {
	if code := deadlockChild(nil); code != 2 {
		t.Errorf("deadlock child with no variant: exit %d, want 2", code)
	}
	if code := deadlockChild([]string{"sideways"}); code != 2 {
		t.Errorf("deadlock child with a bad variant: exit %d, want 2", code)
	}
	if code := prodconsChild([]string{"three-waitgroups"}); code != 2 {
		t.Errorf("prodcons child with a bad variant: exit %d, want 2", code)
	}
}

func TestGoroutineStates(t *testing.T) {
	dump := "goroutine 0 gp=0x1 m=0 mp=0x2 [idle]:\nruntime.x()\n\n" +
		"goroutine 1 gp=0x1 m=nil [sync.WaitGroup.Wait, locked to thread]:\nmain.main()\n\n" +
		"goroutine 2 gp=0x1 m=nil [force gc (idle)]:\nruntime.gopark()\ncreated by runtime.init.7 in goroutine 1\n\n" +
		"goroutine 7 gp=0x1 m=nil mp=0x2 [sync.Mutex.Lock, 2 minutes]:\nmain.f()\ncreated by main.main in goroutine 1\n\n" +
		"goroutine 8 [sync.Mutex.Lock]:\nmain.g()\n"
	got := goroutineStates(dump)
	if got["sync.WaitGroup.Wait"] != 1 || got["sync.Mutex.Lock"] != 2 {
		t.Errorf("states = %v", got)
	}
	if describeStates(got) != "2 in sync.Mutex.Lock, 1 in sync.WaitGroup.Wait" {
		t.Errorf("describe = %q", describeStates(got))
	}
}

func TestCommas(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 1000000: "1,000,000", -12345: "-12,345"} {
		if got := commas(n); got != want {
			t.Errorf("commas(%d) = %q, want %q", n, got, want)
		}
	}
}

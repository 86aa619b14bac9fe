package lab_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"coord/lab"
)

func TestMain(m *testing.M) {
	lab.ServeChild()
	os.Exit(m.Run())
}

func validExperiment(name string) lab.Experiment {
	return lab.Experiment{
		Name: name, Rung: lab.Threads, Short: "short", Help: "help", Articles: "articles",
		Shows: "what it shows", Figure: "a figure",
		Quick: lab.Params{Trials: 1, Procs: 2}, Full: lab.Params{Trials: 3, Procs: 4},
		Run: func(context.Context, *lab.Env) (*lab.Result, error) {
			return &lab.Result{Original: "o", Coord: "c", Verdict: lab.Judge(true, true, "fine")}, nil
		},
	}
}

func TestRegisterRejectsIncompleteExperiments(t *testing.T) {
	tests := map[string]func(*lab.Experiment){
		"bad name":        func(e *lab.Experiment) { e.Name = "Bad Name" },
		"no rung":         func(e *lab.Experiment) { e.Rung = 0 },
		"no help":         func(e *lab.Experiment) { e.Help = "" },
		"no articles":     func(e *lab.Experiment) { e.Articles = "" },
		"no shows":        func(e *lab.Experiment) { e.Shows = "" },
		"no figure":       func(e *lab.Experiment) { e.Figure = "" },
		"long shows":      func(e *lab.Experiment) { e.Shows = strings.Repeat("s", lab.ShowsMax+1) },
		"long figure":     func(e *lab.Experiment) { e.Figure = strings.Repeat("f", lab.CellMax+1) },
		"long name":       func(e *lab.Experiment) { e.Name = "n" + strings.Repeat("x", lab.NameMax) },
		"no run":          func(e *lab.Experiment) { e.Run = nil },
		"zero trials":     func(e *lab.Experiment) { e.Quick.Trials = 0 },
		"procs mismatch":  func(e *lab.Experiment) { e.Quick.Procs = 0 },
		"negative procs":  func(e *lab.Experiment) { e.Full.Procs = -1 },
		"rung past range": func(e *lab.Experiment) { e.Rung = lab.Machines + 1 },
	}
	for name, breakIt := range tests {
		t.Run(name, func(t *testing.T) {
			e := validExperiment("test-invalid")
			breakIt(&e)
			defer func() {
				if recover() == nil {
					t.Fatalf("Register accepted an experiment with %s", name)
				}
			}()
			lab.Register(e)
		})
	}
}

func TestRegisterLookupAndOrder(t *testing.T) {
	machine := validExperiment("test-machine")
	machine.Rung = lab.Machines
	lab.Register(machine)
	lab.Register(validExperiment("test-thread"))
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Register accepted a duplicate name")
			}
		}()
		lab.Register(validExperiment("test-thread"))
	}()
	e, err := lab.Lookup("test-thread")
	if err != nil || e.Name != "test-thread" {
		t.Fatalf("Lookup(test-thread) = %q, %v", e.Name, err)
	}
	_, err = lab.Lookup("no-such")
	if !errors.Is(err, lab.ErrUnknown) || !strings.Contains(err.Error(), "test-thread") {
		t.Fatalf("Lookup(no-such) error = %v, want ErrUnknown listing the known names", err)
	}
	var seenThread bool
	for _, e := range lab.Experiments() {
		if e.Name == "test-thread" {
			seenThread = true
		}
		if e.Name == "test-machine" && !seenThread {
			t.Fatal("a machines experiment came before a threads experiment registered after it")
		}
	}
}

func TestConfigParamsAndValidate(t *testing.T) {
	e := validExperiment("test-params")
	if got := (lab.Config{Quick: true}).Params(e); got != e.Quick {
		t.Errorf("quick params = %+v, want %+v", got, e.Quick)
	}
	if got := (lab.Config{Trials: 7, Procs: 9}).Params(e); got != (lab.Params{Trials: 7, Procs: 9}) {
		t.Errorf("overridden params = %+v", got)
	}
	noProcs := e
	noProcs.Quick.Procs, noProcs.Full.Procs = 0, 0
	for _, c := range []lab.Config{{Trials: -1}, {Trials: lab.TrialsMax + 1}, {Procs: lab.ProcsMax + 1}} {
		if err := c.Validate(e); !errors.Is(err, lab.ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", c, err)
		}
	}
	if err := (lab.Config{Procs: 3}).Validate(noProcs); !errors.Is(err, lab.ErrInvalid) {
		t.Errorf("--procs on an experiment without the knob: %v, want ErrInvalid", err)
	}
}

type countingProgress struct{ starts, steps, finishes atomic.Int32 }

func (p *countingProgress) Start(string, int) { p.starts.Add(1) }
func (p *countingProgress) Step()             { p.steps.Add(1) }
func (p *countingProgress) Finish()           { p.finishes.Add(1) }

func TestRunFillsResultAndEnv(t *testing.T) {
	e := validExperiment("test-run")
	var dir string
	e.Run = func(_ context.Context, env *lab.Env) (*lab.Result, error) {
		dir = env.Dir
		if info, err := os.Stat(env.Dir); err != nil || !info.IsDir() {
			t.Errorf("scratch dir %q: %v", env.Dir, err)
		}
		if env.Trials != 1 || env.Procs != 2 || !env.Quick || env.Rand == nil || env.Binary == "" {
			t.Errorf("env = %+v", env)
		}
		env.Progress.Start("x", 2)
		env.Progress.Step()
		return &lab.Result{Original: "o", Coord: "c", Verdict: lab.Judge(false, true, "why")}, nil
	}
	progress := &countingProgress{}
	r := lab.Run(context.Background(), e, lab.Config{Quick: true, Seed: 42,
		Progress: func(string) lab.Progress { return progress }})
	if r.Experiment != "test-run" || r.Rung != lab.Threads || r.Articles != "articles" || r.Seed != 42 || !r.Quick || r.Params.Trials != 1 {
		t.Errorf("result identity = %+v", r)
	}
	if r.Verdict.Outcome != lab.Differs {
		t.Errorf("outcome = %s, want differs", r.Verdict.Outcome)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("scratch dir %q survived the run: %v", dir, err)
	}
	if progress.starts.Load() != 1 || progress.steps.Load() != 1 || progress.finishes.Load() != 1 {
		t.Errorf("progress calls: %d starts, %d steps, %d finishes", progress.starts.Load(), progress.steps.Load(), progress.finishes.Load())
	}
}

func TestRunTurnsErrorsIntoVerdicts(t *testing.T) {
	e := validExperiment("test-errors")
	e.Run = func(context.Context, *lab.Env) (*lab.Result, error) { return nil, errors.New("broke") }
	if r := lab.Run(context.Background(), e, lab.Config{}); r.Verdict.Outcome != lab.Errored || !strings.Contains(r.Verdict.Reason, "broke") {
		t.Errorf("failing Run: verdict %+v", r.Verdict)
	}
	e.Run = func(context.Context, *lab.Env) (*lab.Result, error) {
		return nil, &lab.UnavailableError{Reason: "no toolchain"}
	}
	if r := lab.Run(context.Background(), e, lab.Config{}); r.Verdict.Outcome != lab.Unavailable {
		t.Errorf("unavailable Run: verdict %+v", r.Verdict)
	}
	e.Run = func(context.Context, *lab.Env) (*lab.Result, error) { return nil, nil }
	if r := lab.Run(context.Background(), e, lab.Config{}); r.Verdict.Outcome != lab.Errored {
		t.Errorf("nil result: verdict %+v", r.Verdict)
	}
	if r := lab.Run(context.Background(), e, lab.Config{Trials: -3}); r.Verdict.Outcome != lab.Errored || !strings.Contains(r.Verdict.Reason, "trials") {
		t.Errorf("invalid config: verdict %+v", r.Verdict)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e = validExperiment("test-cancel")
	if got := lab.RunAll(ctx, []lab.Experiment{e}, lab.Config{}, nil); len(got) != 0 {
		t.Errorf("RunAll on a cancelled context ran %d experiments", len(got))
	}
}

func TestJudge(t *testing.T) {
	for _, tt := range []struct {
		original, coord bool
		want            lab.Outcome
	}{
		{true, true, lab.Reproduced},
		{false, true, lab.Differs},
		{true, false, lab.Failed},
		{false, false, lab.Failed},
	} {
		if got := lab.Judge(tt.original, tt.coord, "r").Outcome; got != tt.want {
			t.Errorf("Judge(%v, %v) = %s, want %s", tt.original, tt.coord, got, tt.want)
		}
	}
	if !lab.Failed.Bad() || !lab.Errored.Bad() || lab.Differs.Bad() || lab.Unavailable.Bad() {
		t.Error("Bad() classifies outcomes wrongly")
	}
}

func TestSummarize(t *testing.T) {
	s := lab.Summarize([]float64{5, 1, 3, 2})
	if s.N != 4 || s.Min != 1 || s.Max != 5 || s.Median != 2.5 || s.Mean != 2.75 {
		t.Errorf("Summarize = %+v", s)
	}
	if (lab.Summarize(nil) != lab.Stats{}) {
		t.Error("Summarize(nil) is not zero")
	}
}

func TestRungText(t *testing.T) {
	for _, r := range []lab.Rung{lab.Threads, lab.Processes, lab.Machines} {
		b, _ := r.MarshalText()
		var back lab.Rung
		if err := back.UnmarshalText(b); err != nil || back != r {
			t.Errorf("rung %v round trip: %v, %v", r, back, err)
		}
	}
	var r lab.Rung
	if err := r.UnmarshalText([]byte("galaxies")); !errors.Is(err, lab.ErrInvalid) {
		t.Errorf("unknown rung: %v", err)
	}
}

func init() {
	lab.RegisterChild("test/echo", func(args []string) int {
		os.Stdout.WriteString(strings.Join(args, " "))
		return 3
	})
}

func TestChildProcess(t *testing.T) {
	env := &lab.Env{Binary: mustExecutable(t)}
	cmd := env.ChildCommand(context.Background(), "test/echo", "a", "b")
	var stdout strings.Builder
	cmd.Stdout = &stdout
	err := cmd.Run()
	var exit interface{ ExitCode() int }
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || stdout.String() != "a b" {
		t.Fatalf("child: %v, stdout %q; want status 3 and \"a b\"", err, stdout.String())
	}
	cmd = env.ChildCommand(context.Background(), "test/none")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr.String(), "test/echo") {
		t.Fatalf("unknown child: %v, stderr %q; want status 2 listing known children", err, stderr.String())
	}
}

func mustExecutable(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRowValidate(t *testing.T) {
	ok := lab.Row{Shows: "what it shows", Articles: "a figure", Original: "lost in 3/10", Coord: "1,000,000 30/30"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v", ok, err)
	}
	for name, breakIt := range map[string]func(*lab.Row){
		"empty coord":   func(r *lab.Row) { r.Coord = "" },
		"long original": func(r *lab.Row) { r.Original = strings.Repeat("o", lab.CellMax+1) },
		"long shows":    func(r *lab.Row) { r.Shows = strings.Repeat("s", lab.ShowsMax+1) },
	} {
		r := ok
		breakIt(&r)
		if err := r.Validate(); !errors.Is(err, lab.ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", name, err)
		}
	}
}

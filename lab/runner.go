package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"
)

// Config says how to run experiments.
type Config struct {
	// Quick selects each experiment's quick configuration instead of its
	// full one.
	Quick bool

	// Trials and Procs override the configuration's values when positive.
	// Procs is refused (ErrInvalid) for an experiment without such a knob.
	Trials int
	Procs  int

	// Seed seeds each experiment's random source. Zero picks one from the
	// clock; the result records the one used.
	Seed uint64

	// Binary is the program Env.Command starts: the coord binary. Empty
	// means this program (os.Executable).
	Binary string

	// TempDir is where scratch directories are made; empty means
	// os.TempDir().
	TempDir string

	// Progress makes a progress sink for an experiment; nil shows nothing.
	Progress func(name string) Progress

	// Logger logs what experiments do; nil discards.
	Logger *slog.Logger
}

// Limits on the sizes a caller may ask for. They keep a typo from starting a
// million processes.
const (
	TrialsMax = 10_000
	ProcsMax  = 1_000
)

// Validate checks cfg against e: the overrides must be in range, and Procs
// must only be given to experiments that have the knob.
func (c Config) Validate(e Experiment) error {
	switch {
	case c.Trials < 0 || c.Trials > TrialsMax:
		return fmt.Errorf("%w: trials %d: want 1 to %d", ErrInvalid, c.Trials, TrialsMax)
	case c.Procs < 0 || c.Procs > ProcsMax:
		return fmt.Errorf("%w: procs %d: want 1 to %d", ErrInvalid, c.Procs, ProcsMax)
	case c.Procs > 0 && e.Full.Procs == 0:
		return fmt.Errorf("%w: %s has no --procs knob", ErrInvalid, e.Name)
	}
	return nil
}

// Params returns the size e runs at under c.
func (c Config) Params(e Experiment) Params {
	p := e.Full
	if c.Quick {
		p = e.Quick
	}
	if c.Trials > 0 {
		p.Trials = c.Trials
	}
	if c.Procs > 0 {
		p.Procs = c.Procs
	}
	return p
}

// Run runs one experiment and returns its result. It never returns nil: an
// experiment that cannot run yields a Result whose verdict is Errored (or
// Unavailable) with the reason. The runner fills in the identifying fields,
// the size, the seed and the timing.
func Run(ctx context.Context, e Experiment, c Config) *Result {
	params := c.Params(e)
	seed := c.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	started := time.Now()
	res, err := runOne(ctx, e, c, params, seed)
	if err != nil {
		res = &Result{Original: "not measured", Coord: "not measured",
			Row:     Row{Original: "not measured", Coord: "not measured"},
			Verdict: Verdict{Outcome: Errored, Reason: err.Error()}}
		var u *UnavailableError
		if errors.As(err, &u) {
			res.Verdict.Outcome = Unavailable
		}
	}
	res.Experiment, res.Rung, res.Articles = e.Name, e.Rung, e.Articles
	res.Row.Shows, res.Row.Articles = e.Shows, e.Figure
	res.Quick, res.Params, res.Seed = c.Quick, params, seed
	res.Started, res.Seconds = started, time.Since(started).Seconds()
	return res
}

func runOne(ctx context.Context, e Experiment, c Config, params Params, seed uint64) (res *Result, err error) {
	if err := c.Validate(e); err != nil {
		return nil, err
	}
	env, cleanup, err := newEnv(e, c, params, seed)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	defer env.Progress.Finish()
	res, err = e.Run(ctx, env)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w", e.Name, err)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s: interrupted: %w", e.Name, context.Cause(ctx))
	case res == nil:
		return nil, fmt.Errorf("%s: Run returned no result and no error", e.Name)
	}
	return res, nil
}

func newEnv(e Experiment, c Config, params Params, seed uint64) (*Env, func(), error) {
	binary := c.Binary
	if binary == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, nil, fmt.Errorf("lab: find own binary: %w", err)
		}
		binary = self
	}
	dir, err := os.MkdirTemp(c.TempDir, "coord-lab-"+e.Name+"-")
	if err != nil {
		return nil, nil, fmt.Errorf("lab: scratch directory: %w", err)
	}
	env := &Env{
		Params: params, Quick: c.Quick, Seed: seed,
		Rand:     rand.New(rand.NewPCG(seed, 0x6c6162)),
		Dir:      dir,
		Binary:   binary,
		Progress: NopProgress{},
		Logger:   c.Logger,
	}
	if c.Progress != nil {
		env.Progress = c.Progress(e.Name)
	}
	if env.Logger == nil {
		env.Logger = slog.New(slog.DiscardHandler)
	}
	env.Logger = env.Logger.With("experiment", e.Name)
	return env, func() { os.RemoveAll(dir) }, nil
}

// RunAll runs the experiments one after another (they measure timing and
// contend for the same cores, so never in parallel) and calls done after each.
// It stops early, returning what it has, when ctx is done.
func RunAll(ctx context.Context, experiments []Experiment, c Config, done func(*Result)) []*Result {
	var results []*Result
	for _, e := range experiments {
		if ctx.Err() != nil {
			break
		}
		r := Run(ctx, e, c)
		results = append(results, r)
		if done != nil {
			done(r)
		}
	}
	return results
}

// UnavailableError says an experiment cannot measure on this machine, and
// why (a tool it needs is missing). Run turns it into an Unavailable verdict.
type UnavailableError struct {
	// Reason says what is missing.
	Reason string
}

func (u *UnavailableError) Error() string { return "unavailable: " + u.Reason }

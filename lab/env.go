package lab

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"os/exec"
	"time"
)

// Env is what an experiment runs with. The runner builds a fresh one for each
// run.
//
// Env is not safe for concurrent use, except Command, ChildCommand and
// Progress, which are.
type Env struct {
	// Params is the effective size: the experiment's quick or full
	// configuration with --trials and --procs applied.
	Params

	// Quick says whether this is the quick configuration. Experiments may
	// use it to shorten waits that are not part of what they measure.
	Quick bool

	// Seed seeds Rand; it is recorded in the result so a run can be
	// repeated with the same random choices (the OS scheduler is not
	// replayed, of course).
	Seed uint64

	// Rand is seeded from Seed.
	Rand *rand.Rand

	// Dir is a scratch directory that exists for this run only.
	Dir string

	// Binary is the coord binary (or a test binary that serves the same
	// children) that Command and ChildCommand start.
	Binary string

	// Progress receives one step per finished trial; never nil.
	Progress Progress

	// Logger logs what the experiment is doing, at debug level mostly;
	// never nil.
	Logger *slog.Logger
}

// Command returns a command that runs the coord binary with args, in its own
// process group so that signals sent to it reach nothing else, killed with
// SIGKILL when ctx is done. Its output is discarded unless the caller sets
// Stdout and Stderr.
func (e *Env) Command(ctx context.Context, args ...string) *exec.Cmd {
	return Command(ctx, e.Binary, args...)
}

// Command returns a command that runs the program at path with args, as
// Env.Command does for the coord binary: in its own process group, killed
// when ctx is done or when the lab's process dies, output discarded unless
// the caller sets Stdout and Stderr.
func Command(ctx context.Context, path string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = childProcAttr()
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	// A child that leaves a grandchild holding its stdout open must not
	// hang Wait forever.
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	return cmd
}

// ChildCommand returns a command that runs the lab child registered under
// name (see RegisterChild) with args, as Command does.
func (e *Env) ChildCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	return e.Command(ctx, append([]string{ChildArg, name}, args...)...)
}

// Progress receives progress of a multi-trial experiment. Implementations
// must be safe for concurrent use: trials may run in parallel.
type Progress interface {
	// Start announces how many steps the run will take in all.
	Start(label string, total int)

	// Step reports one step done.
	Step()

	// Finish says the run is over, whether or not all steps were taken.
	Finish()
}

// NopProgress is a Progress that shows nothing.
type NopProgress struct{}

// Start does nothing.
func (NopProgress) Start(string, int) {}

// Step does nothing.
func (NopProgress) Step() {}

// Finish does nothing.
func (NopProgress) Finish() {}

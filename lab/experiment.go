package lab

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"unicode/utf8"
)

// ErrUnknown means no experiment is registered under the name asked for.
var ErrUnknown = errors.New("lab: unknown experiment")

// ErrInvalid means a Config or a flag value is out of range.
var ErrInvalid = errors.New("lab: invalid configuration")

// Rung is the step of the series' ladder an experiment belongs to.
type Rung int

// The rungs, in the order the articles climb them.
const (
	Threads   Rung = iota + 1 // Part 1: threads sharing memory in one process
	Processes                 // Part 2: processes sharing a disk on one machine
	Machines                  // Part 3: machines sharing only a network
)

// String returns the rung's name: threads, processes or machines.
func (r Rung) String() string {
	switch r {
	case Threads:
		return "threads"
	case Processes:
		return "processes"
	case Machines:
		return "machines"
	}
	return fmt.Sprintf("rung(%d)", int(r))
}

// MarshalText encodes the rung by name, so JSON says "threads", not 1.
func (r Rung) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText decodes a rung name.
func (r *Rung) UnmarshalText(b []byte) error {
	for _, c := range []Rung{Threads, Processes, Machines} {
		if c.String() == string(b) {
			*r = c
			return nil
		}
	}
	return fmt.Errorf("%w: rung %q", ErrInvalid, b)
}

// Params are an experiment's size: how many times it repeats and how many
// concurrent actors (goroutines, processes or nodes) each repetition has.
type Params struct {
	// Trials is the number of repetitions; at least 1.
	Trials int `json:"trials"`

	// Procs is the number of concurrent actors per trial. Zero means the
	// experiment has no such knob, and --procs is refused for it.
	Procs int `json:"procs,omitempty"`
}

// Experiment is one program of the series, runnable and measured.
type Experiment struct {
	// Name is the experiment's command-line name: lower case, digits and
	// dashes ("exclusive-create").
	Name string

	// Rung is the step of the ladder it belongs to.
	Rung Rung

	// Short is one line for `coord lab list`.
	Short string

	// Help says what the experiment shows, how it measures it, and what to
	// predict before running it. It is the experiment's --help text.
	Help string

	// Shows says in at most ShowsMax characters what the experiment
	// demonstrates: the summary table's "shows" column.
	Shows string

	// Articles is the articles' own figure or observation, in full, for the
	// experiment's help and details. It is quoted, never measured.
	Articles string

	// Figure is Articles cut to at most CellMax characters: the summary
	// table's "articles" column.
	Figure string

	// Quick is the size `coord lab` runs with no arguments: all experiments
	// together must finish in under three minutes on two cores.
	Quick Params

	// Full is the size `coord lab run NAME` uses by default: the articles'
	// own sizes where they gave them.
	Full Params

	// Run performs the experiment. It measures both the original and coord's
	// version and returns the result with its summary row and verdict filled
	// in. It returns an error only when it could not measure at all; an
	// original that misbehaves is a result, not an error. Run must return
	// soon after ctx is done.
	Run func(ctx context.Context, env *Env) (*Result, error)
}

var namePattern = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// Limits on the summary table's cells, in characters. The table has six
// columns and must fit in 100: the name, what it shows, and four short cells
// (the articles' figure, the original now, coord now, the verdict), with two
// spaces between columns.
const (
	NameMax  = 16
	ShowsMax = 19
	CellMax  = 15
)

// validate checks the fields Register relies on.
func (e Experiment) validate() error {
	switch {
	case !namePattern.MatchString(e.Name):
		return fmt.Errorf("name %q: want lower case letters, digits and dashes", e.Name)
	case e.Rung < Threads || e.Rung > Machines:
		return fmt.Errorf("%s: rung %d out of range", e.Name, e.Rung)
	case utf8.RuneCountInString(e.Name) > NameMax:
		return fmt.Errorf("name %q: longer than %d characters", e.Name, NameMax)
	case e.Short == "" || e.Help == "" || e.Articles == "" || e.Shows == "" || e.Figure == "":
		return fmt.Errorf("%s: Short, Help, Shows, Articles and Figure are all required", e.Name)
	case utf8.RuneCountInString(e.Shows) > ShowsMax:
		return fmt.Errorf("%s: Shows %q is longer than %d characters", e.Name, e.Shows, ShowsMax)
	case utf8.RuneCountInString(e.Figure) > CellMax:
		return fmt.Errorf("%s: Figure %q is longer than %d characters", e.Name, e.Figure, CellMax)
	case e.Run == nil:
		return fmt.Errorf("%s: Run is nil", e.Name)
	case e.Quick.Trials < 1 || e.Full.Trials < 1:
		return fmt.Errorf("%s: Quick.Trials %d and Full.Trials %d must be at least 1", e.Name, e.Quick.Trials, e.Full.Trials)
	case e.Quick.Procs < 0 || e.Full.Procs < 0 || (e.Quick.Procs == 0) != (e.Full.Procs == 0):
		return fmt.Errorf("%s: Quick.Procs %d and Full.Procs %d must both be positive or both zero", e.Name, e.Quick.Procs, e.Full.Procs)
	}
	return nil
}

var (
	registryMu sync.Mutex
	registry   []Experiment
)

// Register adds an experiment to the lab. Rung packages call it from init.
// It panics if the experiment is incomplete or its name is taken: both are
// programming errors that must not survive the first run of the binary.
func Register(e Experiment) {
	if err := e.validate(); err != nil {
		panic("lab: Register: " + err.Error())
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	for _, have := range registry {
		if have.Name == e.Name {
			panic("lab: Register called twice for " + e.Name)
		}
	}
	registry = append(registry, e)
}

// Experiments returns every registered experiment, rung by rung in the order
// the articles climb them, and within a rung in registration order.
func Experiments() []Experiment {
	registryMu.Lock()
	defer registryMu.Unlock()
	all := slices.Clone(registry)
	slices.SortStableFunc(all, func(a, b Experiment) int { return int(a.Rung) - int(b.Rung) })
	return all
}

// Lookup returns the experiment registered under name, or an error wrapping
// ErrUnknown that lists the known names.
func Lookup(name string) (Experiment, error) {
	all := Experiments()
	names := make([]string, 0, len(all))
	for _, e := range all {
		if e.Name == name {
			return e, nil
		}
		names = append(names, e.Name)
	}
	return Experiment{}, fmt.Errorf("%w %q (known: %v)", ErrUnknown, name, names)
}

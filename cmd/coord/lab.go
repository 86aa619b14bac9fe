package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"coord/lab"
	"coord/lab/report"

	// The rungs' experiments register themselves with lab.
	_ "coord/lab/machines"
	_ "coord/lab/processes"
	_ "coord/lab/threads"
)

// A coord binary started as `coord lab-child NAME ...` runs one of the lab's
// child programs (a deadlock on purpose, say) and exits. It must happen
// before main installs its signal handler: with os/signal's watcher alive,
// the runtime cannot report that all goroutines are asleep.
func init() { lab.ServeChild() }

// labFlags are the flags shared by `coord lab` and `coord lab run NAME`.
type labFlags struct {
	jsonOut bool
	outDir  string
	seed    uint64
	verbose bool
}

func (f *labFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&f.jsonOut, "json", false, "write one JSON document to stdout instead of tables")
	fl.StringVar(&f.outDir, "out", "", "write report.html, lab.json and a PNG per chart into `DIR` (default "+report.DefaultDirBase+"/TIME, under the current directory)")
	fl.Uint64Var(&f.seed, "seed", 0, "seed for the experiments' random choices (0: from the clock; the seed used is reported)")
}

func newLabCmd() *cobra.Command {
	var f labFlags
	var full bool
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Run the experiments of the Coordination series, measured",
		Long: `coord lab runs every experiment of the Coordination series in quick mode and
ends with one summary table, a line per experiment: what it shows, the
articles' figure, the articles' original program measured now, coord's
version measured now, and a verdict; a legend of the columns and verdicts
follows it, then why each verdict. The articles' programs are re-implemented
inside coord, bugs included, and run as real goroutines and real processes.

Every run also writes its results into a directory (lab-out/TIME under the
current directory, or --out DIR), checked for writability before the run
starts, and the summary names it: report.html (one page with the table,
every result and every chart, readable in a browser without a server),
lab.json, and one PNG per chart.

Verdicts: "reproduced" (the original behaved as the articles report and coord
was correct), "differs" (coord was correct, the original did not show the
articles' behaviour in this run), "failed" (coord was wrong), "unavailable"
(a tool the experiment needs is missing), "error". coord lab exits 1 if any
experiment failed or broke.

Run one experiment at its full size with 'coord lab run NAME'; read what it
shows, and what to predict, with 'coord lab run NAME --help'.

With --json, one JSON object on stdout (the same as DIR/lab.json) instead
of the tables; progress and the files' directory go to stderr.`,
		Example: `  coord lab                          # quick mode, about 2 minutes on 2 cores
  coord lab --out /tmp/lab -v        # results in /tmp/lab, details after the summary
  coord lab --full --json > lab.json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := lab.Config{Quick: !full, Seed: f.seed}
			return runLab(cmd, lab.Experiments(), cfg, f)
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&full, "full", false, "run every experiment at its full size instead of quick mode")
	cmd.Flags().BoolVarP(&f.verbose, "verbose", "v", false, "print every experiment's details after the summary")
	cmd.AddCommand(newLabListCmd(), newLabRunCmd())
	return cmd
}

func newLabListCmd() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the experiments",
		Long: `List the experiments by rung, one line each. With --json, one JSON object:
{"experiments": [{"name", "rung", "short", "shows", "articles", "quick",
"full"}]}, quick and full being the sizes ({"trials", "procs"}).`,
		Example: `  coord lab list
  coord lab list --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !jsonOut {
				return report.WriteList(cmd.OutOrStdout(), lab.Experiments())
			}
			type entry struct {
				Name     string     `json:"name"`
				Rung     string     `json:"rung"`
				Short    string     `json:"short"`
				Shows    string     `json:"shows"`
				Articles string     `json:"articles"`
				Quick    lab.Params `json:"quick"`
				Full     lab.Params `json:"full"`
			}
			var list struct {
				Experiments []entry `json:"experiments"`
			}
			for _, e := range lab.Experiments() {
				list.Experiments = append(list.Experiments, entry{e.Name, e.Rung.String(), e.Short, e.Shows, e.Articles, e.Quick, e.Full})
			}
			return writeJSON(cmd.OutOrStdout(), list)
		},
	}
	addJSONFlag(cmd, &jsonOut, "print one JSON object listing the experiments")
	return cmd
}

// newLabRunCmd has one subcommand per registered experiment, so that
// `coord lab run NAME --help` prints the experiment's own help.
func newLabRunCmd() *cobra.Command {
	run := &cobra.Command{
		Use:   "run NAME [flags]",
		Short: "Run one experiment at its full size",
		Long: `Run one experiment, at its full size unless --quick, and print what it
measured. 'coord lab run NAME --help' says what the experiment shows, what
to predict before running it, and its flags (--trials, --procs where it has
the knob, --quick, --out, --json, --seed). 'coord lab list' lists the names.`,
		Example: `  coord lab run race --quick
  coord lab run exclusive-create --trials 20 --json
  coord lab run race --help`,
		Args: usageArgs(func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("missing experiment name (see 'coord lab list')")
			}
			return fmt.Errorf("unknown experiment %q (see 'coord lab list')", args[0])
		}),
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	for _, e := range lab.Experiments() {
		run.AddCommand(newExperimentCmd(e))
	}
	return run
}

func newExperimentCmd(e lab.Experiment) *cobra.Command {
	var f labFlags
	var trials, procs int
	var quick bool
	size := fmt.Sprintf("full: %d trials", e.Full.Trials)
	if e.Full.Procs > 0 {
		size += fmt.Sprintf(" x %d procs", e.Full.Procs)
	}
	size += fmt.Sprintf("; quick: %d trials", e.Quick.Trials)
	if e.Quick.Procs > 0 {
		size += fmt.Sprintf(" x %d procs", e.Quick.Procs)
	}
	use := e.Name + " [--trials N] [--quick] [--out DIR] [--json] [--seed N]"
	example := fmt.Sprintf("  coord lab run %s --quick\n  coord lab run %s --trials %d --json", e.Name, e.Name, e.Quick.Trials)
	if e.Full.Procs > 0 {
		use = e.Name + " [--trials N] [--procs N] [--quick] [--out DIR] [--json] [--seed N]"
		example += fmt.Sprintf("\n  coord lab run %s --quick --procs %d", e.Name, e.Quick.Procs)
	}
	cmd := &cobra.Command{
		Use:     use,
		Example: example,
		Short:   fmt.Sprintf("%s: %s", e.Rung, e.Short),
		Long:    fmt.Sprintf("%s (%s)\n\n%s\n\nThe articles: %s.\nSize: %s.", e.Name, e.Rung, e.Help, e.Articles, size),
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := lab.Config{Quick: quick, Trials: trials, Procs: procs, Seed: f.seed}
			if err := cfg.Validate(e); err != nil {
				return &usageError{err: err}
			}
			f.verbose = true
			return runLab(cmd, []lab.Experiment{e}, cfg, f)
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.IntVar(&trials, "trials", 0, "number of trials (0: the experiment's default)")
	if e.Full.Procs > 0 {
		fl.IntVar(&procs, "procs", 0, "concurrent goroutines or processes per trial (0: the experiment's default)")
	}
	fl.BoolVar(&quick, "quick", false, "use the quick configuration")
	return cmd
}

// runLab runs experiments and presents the results as f asks: a line per
// experiment as it finishes, then the summary with its legend and reasons,
// each result's details when verbose, and the files, whose directory is
// checked before anything runs.
func runLab(cmd *cobra.Command, experiments []lab.Experiment, cfg lab.Config, f labFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	started := time.Now()
	outDir := f.outDir
	if outDir == "" {
		outDir = report.DefaultDir(started)
	}
	if err := report.PrepareDir(outDir); err != nil {
		return usagef("--out %s: %v", outDir, err)
	}
	if file, ok := stderr.(*os.File); ok && !f.jsonOut {
		cfg.Progress = report.Progress(file)
	}
	cfg.Logger = slog.Default()
	ctx := cmd.Context() // never nil: cobra sets one before running a command
	// The machine as the run begins: the load average the results were
	// measured under, not the one after them.
	m := report.ThisMachine()
	if !f.jsonOut {
		mode := "full size"
		if cfg.Quick {
			mode = "quick mode"
		}
		fmt.Fprintf(stdout, "coord lab: %d experiment(s), %s (GOMAXPROCS %d, %d CPUs, load average %.1f, %s %s/%s)\n\n",
			len(experiments), mode, m.GOMAXPROCS, m.NumCPU, m.LoadAverage, m.GoVersion, m.GOOS, m.GOARCH)
	}
	results := lab.RunAll(ctx, experiments, cfg, func(r *lab.Result) {
		if !f.jsonOut {
			fmt.Fprintf(stdout, "  %-17s %-11s %5.1f s\n", r.Experiment, r.Verdict.Outcome, r.Seconds)
		}
	})
	doc := report.NewDocument(started, results)
	doc.Machine = m
	paths, filesErr := report.WriteFiles(outDir, doc)
	if f.jsonOut {
		if err := report.WriteJSON(stdout, doc); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "coord lab: wrote %d file(s) to %s\n", len(paths), outDir)
	} else {
		fmt.Fprintln(stdout)
		if err := report.WriteSummary(stdout, results); err != nil {
			return err
		}
		if f.verbose {
			for _, r := range results {
				fmt.Fprintln(stdout)
				_ = report.WriteResult(stdout, r)
			}
		}
		fmt.Fprintf(stdout, "\nWall time %.1f s. Results: %s (%d file(s): the charts, lab.json, report.html).\n",
			doc.Seconds, filepath.Join(outDir, "report.html"), len(paths))
	}
	if filesErr != nil {
		return filesErr
	}
	if ctx.Err() != nil {
		return fmt.Errorf("lab interrupted after %d of %d experiment(s)", len(results), len(experiments))
	}
	return labFailures(results)
}

// labFailures returns an error naming the experiments whose verdict should
// fail the command, or nil.
func labFailures(results []*lab.Result) error {
	var bad []string
	for _, r := range results {
		if r.Verdict.Outcome.Bad() {
			bad = append(bad, fmt.Sprintf("%s (%s)", r.Experiment, r.Verdict.Outcome))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return errors.New("lab: " + strings.Join(bad, ", "))
}

// Package lab runs the experiments of the Coordination series: each one
// re-implements the articles' original program, bugs included, beside coord's
// own version of the same job, measures both in the same run, and says whether
// what it saw matches what the articles report.
//
// Experiments live in one package per rung (lab/threads, lab/processes,
// lab/machines) and join the lab with one call each, from an init function:
//
//	func init() {
//		lab.Register(lab.Experiment{
//			Name:     "quorum-size",
//			Rung:     lab.Machines,
//			Short:    "how many failures 3, 4 and 5 nodes survive",
//			Help:     "What it shows ... Predict before running: ...",
//			Articles: "3 and 4 nodes tolerate 1 failure; 5 tolerate 2",
//			Quick:    lab.Params{Trials: 1},
//			Full:     lab.Params{Trials: 3},
//			Run:      runQuorum,
//		})
//	}
//
// The coord command imports each rung's package for that side effect, as
// database/sql programs import drivers. Run receives an Env (the effective
// trial and process counts, a seeded random source, a scratch directory, the
// coord binary to re-execute, a progress sink) and returns a Result: the
// summary row (the articles' figure, the original measured now, coord measured
// now, a Verdict), details, chart data and raw measurements. lab/report turns
// results into tables, one JSON document and charts.
//
// Experiments that might wedge a process (a deadlock on purpose) run their
// dangerous half in a child process: RegisterChild names a function that the
// coord binary runs when started as `coord lab-child NAME ...`, and
// Env.ChildCommand starts it. ServeChild must be called before anything else
// in the program starts goroutines or installs signal handlers, or the Go
// runtime can no longer tell that all goroutines are asleep.
package lab

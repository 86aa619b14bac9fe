package lab

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// Outcome classifies a verdict.
type Outcome string

// The outcomes, from best to worst for the lab's claims.
const (
	// Reproduced: the original behaved as the articles report, and coord's
	// version was correct.
	Reproduced Outcome = "reproduced"

	// Differs: coord's version was correct, but the original did not show
	// what the articles report in this run (a race that did not fire in 30
	// trials, a ratio outside the articles' band). Not a failure of coord; a
	// fact about this machine and this run, reported as such.
	Differs Outcome = "differs"

	// Failed: coord's own version misbehaved (two leaders, a lost update, a
	// stale write accepted). The lab exits non-zero.
	Failed Outcome = "failed"

	// Unavailable: the experiment could not measure here (a tool it needs is
	// missing); the reason says what.
	Unavailable Outcome = "unavailable"

	// Errored: the experiment itself broke before it could measure. The lab
	// exits non-zero.
	Errored Outcome = "error"
)

// Bad reports whether the outcome should make the lab exit non-zero.
func (o Outcome) Bad() bool { return o == Failed || o == Errored }

// Verdict is an experiment's conclusion about one run.
type Verdict struct {
	// Outcome classifies the run.
	Outcome Outcome `json:"outcome"`

	// Reason says why, in one sentence that names the measured figures.
	Reason string `json:"reason"`
}

// Judge builds the usual verdict from two judgements: whether the original
// behaved as the articles report, and whether coord's version was correct.
// A wrong coord is Failed whatever the original did.
func Judge(originalAsArticles, coordCorrect bool, reason string) Verdict {
	switch {
	case !coordCorrect:
		return Verdict{Outcome: Failed, Reason: reason}
	case originalAsArticles:
		return Verdict{Outcome: Reproduced, Reason: reason}
	default:
		return Verdict{Outcome: Differs, Reason: reason}
	}
}

// Row holds an experiment's short cells in the summary table, each at most
// CellMax characters (Shows at most ShowsMax): the table keeps one line per
// experiment within 100 columns, and the full sentences live in Result's
// Original, Coord and Verdict.Reason. A longer cell is cut with "…".
type Row struct {
	// Shows is what the experiment demonstrates (Experiment.Shows).
	Shows string `json:"shows"`

	// Articles is the articles' figure, short (Experiment.Figure).
	Articles string `json:"articles"`

	// Original is the articles' version measured now: "8.9 s", "lost 12%".
	Original string `json:"original"`

	// Coord is coord's version measured now.
	Coord string `json:"coord"`
}

// Validate reports a cell that is empty or longer than its limit: the
// table would cut it with "…". Experiments' tests call it on real results.
func (r Row) Validate() error {
	for _, c := range []struct {
		name, text string
		limit      int
	}{{"Shows", r.Shows, ShowsMax}, {"Articles", r.Articles, CellMax}, {"Original", r.Original, CellMax}, {"Coord", r.Coord, CellMax}} {
		if n := utf8.RuneCountInString(c.text); n == 0 || n > c.limit {
			return fmt.Errorf("%w: Row.%s %q: want 1 to %d characters", ErrInvalid, c.name, c.text, c.limit)
		}
	}
	return nil
}

// Detail is one labelled line of an experiment's detailed output.
type Detail struct {
	// Label names the measured quantity ("totals", "race detector").
	Label string `json:"label"`

	// Value is the measured figure, formatted for reading.
	Value string `json:"value"`
}

// ChartKind says how a chart's series are drawn.
type ChartKind string

// Chart kinds.
const (
	// Trials draws each series as points over the trial index: leaders per
	// trial, a counter total per run.
	Trials ChartKind = "trials"

	// Histogram draws the distribution of each series' values: failover
	// gaps, counter totals.
	Histogram ChartKind = "histogram"

	// Bars draws one bar per category and series: a time per variant.
	Bars ChartKind = "bars"
)

// Series is one named set of values in a chart.
type Series struct {
	// Label names the series in the legend ("articles: stat then create").
	Label string `json:"label"`

	// Values are the data points.
	Values []float64 `json:"values"`
}

// Chart is the data for one chart; lab/report draws it.
type Chart struct {
	// Name is the chart's file stem, unique within the experiment.
	Name string `json:"name"`

	// Title, XLabel and YLabel label the chart; units go in the labels.
	Title  string `json:"title"`
	XLabel string `json:"x_label"`
	YLabel string `json:"y_label"`

	// Kind says how to draw the series.
	Kind ChartKind `json:"kind"`

	// Categories names the bars of a Bars chart, one per value of each
	// series; empty for other kinds.
	Categories []string `json:"categories,omitempty"`

	// Series holds the data.
	Series []Series `json:"series"`

	// Percent draws a Histogram's bars as each series' share of its own
	// values, so that series of different sizes compare.
	Percent bool `json:"percent,omitempty"`
}

// Result is what one run of an experiment measured.
type Result struct {
	// Experiment and Rung identify the experiment; the runner fills them.
	Experiment string `json:"experiment"`
	Rung       Rung   `json:"rung"`

	// Quick and Params record the size it ran at; Seed the random seed.
	Quick  bool   `json:"quick"`
	Params Params `json:"params"`
	Seed   uint64 `json:"seed"`

	// Articles is the articles' figure (quoted); the runner fills it from the
	// Experiment.
	Articles string `json:"articles"`

	// Row is the experiment's line in the summary table. The experiment
	// fills Row.Original and Row.Coord; the runner fills the rest.
	Row Row `json:"row"`

	// Original is what the articles' version did now, measured.
	Original string `json:"original"`

	// Coord is what coord's version did now, measured.
	Coord string `json:"coord"`

	// Verdict compares the two with the articles.
	Verdict Verdict `json:"verdict"`

	// Details are further measured lines, in reading order.
	Details []Detail `json:"details,omitempty"`

	// Charts hold the data behind the figures.
	Charts []Chart `json:"charts,omitempty"`

	// Data holds the raw measurements, experiment-specific, for the JSON
	// document.
	Data any `json:"data,omitempty"`

	// Started and Seconds say when the run began and how long it took; the
	// runner fills them.
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
}

// AddDetail appends a detail line whose value is formatted as by fmt.Sprintf.
func (r *Result) AddDetail(label, format string, args ...any) {
	r.Details = append(r.Details, Detail{Label: label, Value: fmt.Sprintf(format, args...)})
}

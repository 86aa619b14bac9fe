// Package report presents lab results: a summary table with its legend and
// reasons and detailed blocks on a terminal, one JSON document for
// programs, each experiment's charts (PNG, drawn with gonum.org/v1/plot),
// and report.html, one self-contained page with all of them for readers. It
// also provides the progress bar multi-trial experiments show on a
// terminal.
//
// The summary keeps one line per experiment within SummaryWidth columns,
// from the short cells each result carries (lab.Row). The charts follow a
// few rules so that they read at a glance: the legend below the plot, never
// over the data; a logarithmic value axis when positive values span a
// decade or more, a linear one from zero otherwise; whole-number ticks for
// counts; series side by side, each with its own glyph, so that none hides
// another; every bar labelled with its value, a zero bar drawn as a stub.
//
// report knows nothing about particular experiments: everything it draws
// comes from lab.Result, so a new experiment (lab/machines' came last) is
// presented without changes here.
package report

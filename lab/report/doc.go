// Package report presents lab results: a summary table and detailed blocks on
// a terminal, one JSON document for programs, and each experiment's charts
// (PNG, drawn with gonum.org/v1/plot) for readers. It also provides the
// progress bar multi-trial experiments show on a terminal.
//
// report knows nothing about particular experiments: everything it draws
// comes from lab.Result, so a new experiment (lab/machines' came last) is
// presented without changes here.
package report

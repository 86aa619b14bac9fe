package report

import (
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"

	"coord/lab"
)

// SummaryWidth is the widest line the summary writes, in characters.
const SummaryWidth = 100

// summaryHeader names the summary table's columns; the legend explains them.
var summaryHeader = []string{"experiment", "shows", "articles", "original now", "coord now", "verdict"}

// legend explains the summary table's columns and verdicts, in the order
// the table shows them.
var legend = []struct{ title, term, text string }{
	{"Columns", "shows", "what the experiment demonstrates ('coord lab run NAME --help' says more)"},
	{"", "articles", "the articles' own figure, quoted, never measured"},
	{"", "original now", "the articles' program, re-implemented bugs included, measured in this run"},
	{"", "coord now", "coord's version of the same job, measured in this run"},
	{"Verdicts", string(lab.Reproduced), "the original behaved as the articles report, and coord was correct"},
	{"", string(lab.Differs), "coord was correct; the original did not behave as the articles report here"},
	{"", string(lab.Failed), "coord misbehaved (two leaders, a lost update, a stale write): exit status 1"},
	{"", string(lab.Unavailable), "a tool the experiment needs is missing on this machine"},
	{"", string(lab.Errored), "the experiment could not run: exit status 1"},
}

// SummaryRow returns r's cells in the summary table, in the order of the
// header: the Row the experiment filled in, with the full sentences standing
// in for cells it left empty. Cells are not cut to width here.
func SummaryRow(r *lab.Result) []string {
	pick := func(short, long string) string {
		if short != "" {
			return short
		}
		return long
	}
	return []string{r.Experiment, r.Row.Shows, pick(r.Row.Articles, r.Articles),
		pick(r.Row.Original, r.Original), pick(r.Row.Coord, r.Coord), string(r.Verdict.Outcome)}
}

// WriteSummary writes the summary of results as a reader meets it cold: a
// table with one line per experiment, within SummaryWidth columns (the name,
// what it shows, the articles' figure, the original and coord measured now,
// the verdict); a count of outcomes; a legend of the columns and verdicts;
// and why each experiment got its verdict, in the experiment's own words.
func WriteSummary(w io.Writer, results []*lab.Result) error {
	rows := [][]string{summaryHeader}
	for _, r := range results {
		rows = append(rows, SummaryRow(r))
	}
	var b strings.Builder
	writeTable(&b, rows, fitWidths(rows, SummaryWidth))
	fmt.Fprintf(&b, "\n%d experiment(s): %s.\n\n", len(results), outcomeCounts(results))
	for _, l := range legend {
		if l.title != "" {
			b.WriteString(l.title + "\n")
		}
		writeHanging(&b, fmt.Sprintf("  %-12s  ", l.term), l.text, SummaryWidth)
	}
	b.WriteString("\nWhy\n")
	for _, r := range results {
		writeHanging(&b, "  ", fmt.Sprintf("%s, %s: %s", r.Experiment, r.Verdict.Outcome, r.Verdict.Reason), SummaryWidth)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeHanging writes prefix and text wrapped to width. Later lines line up
// under the text when the prefix is a label, and hang two spaces deeper than
// the first when it is only an indent.
func writeHanging(b *strings.Builder, prefix, text string, width int) {
	indent := utf8.RuneCountInString(prefix)
	if strings.TrimSpace(prefix) == "" {
		indent += 2
	}
	lines := wrap(text, width-utf8.RuneCountInString(prefix))
	b.WriteString(prefix + lines[0] + "\n")
	if len(lines) == 1 {
		return
	}
	for _, line := range wrap(strings.Join(lines[1:], " "), width-indent) {
		b.WriteString(strings.Repeat(" ", indent) + line + "\n")
	}
}

// fitWidths returns column widths that hold every cell up to the cells'
// limits (lab.ShowsMax, lab.CellMax), shrunk to fit a line of width
// characters (two spaces between columns): while too wide, the widest
// middle column (not the name, not the verdict) loses a character. Cells
// wider than their column are cut by writeTable.
func fitWidths(rows [][]string, width int) []int {
	// The middle columns' caps are the limits experiments keep their short
	// cells to; only a row that fell back on its sentences meets them.
	caps := []int{math.MaxInt, lab.ShowsMax, lab.CellMax, lab.CellMax, lab.CellMax, math.MaxInt}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for c, cell := range row {
			widths[c] = max(widths[c], min(caps[c], utf8.RuneCountInString(cell)))
		}
	}
	total := func() int {
		sum := 2 * (len(widths) - 1)
		for _, w := range widths {
			sum += w
		}
		return sum
	}
	for total() > width {
		widest := 1
		for c := 2; c < len(widths)-1; c++ {
			if widths[c] > widths[widest] {
				widest = c
			}
		}
		if widths[widest] <= 6 {
			break // a line cannot fit; better too wide than unreadable
		}
		widths[widest]--
	}
	return widths
}

// WriteResult writes one result as a block: a heading with the size it ran
// at, the summary row as labelled lines, the verdict with its reason, then
// the details.
func WriteResult(w io.Writer, r *lab.Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "== %s (%s) - %s\n", r.Experiment, r.Rung, sizeLine(r))
	lines := []lab.Detail{
		{Label: "articles", Value: r.Articles},
		{Label: "original now", Value: r.Original},
		{Label: "coord now", Value: r.Coord},
		{Label: "verdict", Value: fmt.Sprintf("%s: %s", r.Verdict.Outcome, r.Verdict.Reason)},
	}
	lines = append(lines, r.Details...)
	labelWidth := 0
	for _, d := range lines {
		labelWidth = max(labelWidth, utf8.RuneCountInString(d.Label))
	}
	for _, d := range lines {
		for i, line := range wrap(d.Value, max(100-labelWidth-4, 30)) {
			label := d.Label
			if i > 0 {
				label = ""
			}
			fmt.Fprintf(&b, "  %-*s  %s\n", labelWidth, label, line)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTable writes rows (the first is the header) one line each, every
// cell padded or cut to its column's width, a rule under the header, and two
// spaces between columns.
func writeTable(b *strings.Builder, rows [][]string, widths []int) {
	for i, row := range rows {
		parts := make([]string, len(row))
		for c, cell := range row {
			parts[c] = pad(cut(cell, widths[c]), widths[c])
		}
		b.WriteString(strings.TrimRight(strings.Join(parts, "  "), " ") + "\n")
		if i == 0 {
			var rules []string
			for _, wd := range widths {
				rules = append(rules, strings.Repeat("-", wd))
			}
			b.WriteString(strings.Join(rules, "  ") + "\n")
		}
	}
}

// cut shortens s to width characters, ending in "…" when it was longer.
func cut(s string, width int) string {
	r := []rune(s)
	if len(r) <= width {
		return s
	}
	if width < 1 {
		return ""
	}
	return string(r[:width-1]) + "…"
}

// wrap breaks text into lines of at most width characters at spaces; a word
// longer than width gets a line of its own and is cut.
func wrap(text string, width int) []string {
	var lines []string
	var line string
	for _, word := range strings.Fields(text) {
		for utf8.RuneCountInString(word) > width {
			if line != "" {
				lines, line = append(lines, line), ""
			}
			r := []rune(word)
			lines, word = append(lines, string(r[:width])), string(r[width:])
		}
		switch {
		case line == "":
			line = word
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) <= width:
			line += " " + word
		default:
			lines, line = append(lines, line), word
		}
	}
	if line != "" || len(lines) == 0 {
		lines = append(lines, line)
	}
	return lines
}

func pad(s string, width int) string {
	return s + strings.Repeat(" ", max(0, width-utf8.RuneCountInString(s)))
}

// WriteList writes the registered experiments, rung by rung, one line each.
func WriteList(w io.Writer, experiments []lab.Experiment) error {
	var b strings.Builder
	var rung lab.Rung
	for _, e := range experiments {
		if e.Rung != rung {
			rung = e.Rung
			fmt.Fprintf(&b, "%s:\n", rung)
		}
		fmt.Fprintf(&b, "  %-17s %s\n", e.Name, e.Short)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

package report

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"coord/lab"
)

// Column widths of the summary table, in characters. The table fits in about
// 110 columns; longer cells wrap at word boundaries.
var summaryWidths = []int{16, 24, 26, 26, 10}

// WriteSummary writes the summary table of results: one row per experiment
// with the articles' figure, the original measured now, coord measured now
// and the verdict, followed by a count of outcomes and the reasons behind any
// verdict other than "reproduced".
func WriteSummary(w io.Writer, results []*lab.Result) error {
	rows := [][]string{{"experiment", "articles", "original (now)", "coord (now)", "verdict"}}
	for _, r := range results {
		rows = append(rows, []string{r.Experiment, r.Articles, r.Original, r.Coord, string(r.Verdict.Outcome)})
	}
	var b strings.Builder
	writeTable(&b, rows, summaryWidths)
	counts := map[lab.Outcome]int{}
	for _, r := range results {
		counts[r.Verdict.Outcome]++
	}
	var parts []string
	for _, o := range []lab.Outcome{lab.Reproduced, lab.Differs, lab.Failed, lab.Unavailable, lab.Errored} {
		if counts[o] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[o], o))
		}
	}
	fmt.Fprintf(&b, "\n%d experiments: %s.\n", len(results), strings.Join(parts, ", "))
	for _, r := range results {
		if r.Verdict.Outcome != lab.Reproduced {
			fmt.Fprintf(&b, "  %s %s: %s\n", r.Experiment, r.Verdict.Outcome, r.Verdict.Reason)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteResult writes one result as a block: a heading with the size it ran
// at, the summary row as labelled lines, the verdict with its reason, then
// the details.
func WriteResult(w io.Writer, r *lab.Result) error {
	var b strings.Builder
	mode := "full"
	if r.Quick {
		mode = "quick"
	}
	size := fmt.Sprintf("%d trials", r.Params.Trials)
	if r.Params.Procs > 0 {
		size += fmt.Sprintf(", %d procs", r.Params.Procs)
	}
	fmt.Fprintf(&b, "== %s (%s) - %s, %s, seed %d, %.1f s\n", r.Experiment, r.Rung, mode, size, r.Seed, r.Seconds)
	lines := []lab.Detail{
		{Label: "articles", Value: r.Articles},
		{Label: "original (now)", Value: r.Original},
		{Label: "coord (now)", Value: r.Coord},
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

// writeTable writes rows (the first is the header) with each cell wrapped to
// its column's width, a rule under the header, and two spaces between
// columns.
func writeTable(b *strings.Builder, rows [][]string, widths []int) {
	for i, row := range rows {
		cells := make([][]string, len(row))
		height := 1
		for c, cell := range row {
			cells[c] = wrap(cell, widths[c])
			height = max(height, len(cells[c]))
		}
		for line := range height {
			var parts []string
			for c := range row {
				text := ""
				if line < len(cells[c]) {
					text = cells[c][line]
				}
				parts = append(parts, pad(text, widths[c]))
			}
			b.WriteString(strings.TrimRight(strings.Join(parts, "  "), " ") + "\n")
		}
		if i == 0 {
			var rules []string
			for _, wd := range widths {
				rules = append(rules, strings.Repeat("-", wd))
			}
			b.WriteString(strings.Join(rules, "  ") + "\n")
		}
	}
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

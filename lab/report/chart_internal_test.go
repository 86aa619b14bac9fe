package report

import (
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"coord/lab"
)

func labels(ticks []plot.Tick) []string {
	var out []string
	for _, t := range ticks {
		if t.Label != "" {
			out = append(out, t.Label)
		}
	}
	return out
}

// TestAxisForMillisecondsBesideSeconds: coord's milliseconds and the
// articles' seconds on one linear axis would put coord's points on zero.
func TestAxisForMillisecondsBesideSeconds(t *testing.T) {
	p, err := Plot(lab.Chart{Name: "gaps", Kind: lab.Trials, Series: []lab.Series{
		{Label: "articles", Values: []float64{8.9, 6.5, 11.3}}, {Label: "coord", Values: []float64{0.009, 0.023, 0.014}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Y.Scale.(plot.LogScale); !ok {
		t.Fatalf("y scale %T, want a log scale", p.Y.Scale)
	}
	got := strings.Join(labels(p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max)), " ")
	if got != "0.001 0.01 0.1 1 10 100" {
		t.Errorf("log ticks %q", got)
	}
	// Within a decade, or with a zero, the axis stays linear from zero.
	for _, values := range [][]float64{{0.040, 0.013}, {0, 0.009, 9}} {
		p, err := Plot(lab.Chart{Name: "t", Kind: lab.Trials, Series: []lab.Series{{Label: "a", Values: values}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := p.Y.Scale.(plot.LogScale); ok || p.Y.Min != 0 {
			t.Errorf("%v: scale %T from %v, want linear from 0", values, p.Y.Scale, p.Y.Min)
		}
	}
}

// TestCountsGetWholeNumbers: "5.00 trials" and a ±1 axis around a million
// are what the charts used to show.
func TestCountsGetWholeNumbers(t *testing.T) {
	for name, c := range map[string]lab.Chart{
		"bars":      {Name: "b", Kind: lab.Bars, Categories: []string{"x", "y"}, Series: []lab.Series{{Label: "a", Values: []float64{4, 0}}}},
		"trials":    {Name: "t", Kind: lab.Trials, Series: []lab.Series{{Label: "a", Values: []float64{1, 1, 2}}}},
		"histogram": {Name: "h", Kind: lab.Histogram, Series: []lab.Series{{Label: "a", Values: []float64{2.5, 3.1, 3.3}}}},
		"equal":     {Name: "e", Kind: lab.Trials, Series: []lab.Series{{Label: "a", Values: []float64{1e6, 1e6}}, {Label: "b", Values: []float64{1e6, 1e6}}}},
	} {
		p, err := Plot(c)
		if err != nil {
			t.Fatal(err)
		}
		ls := labels(p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max))
		if len(ls) < 2 {
			t.Errorf("%s: y labels %v: want at least two", name, ls)
		}
		for _, l := range ls {
			if _, err := strconv.Atoi(strings.ReplaceAll(l, ",", "")); err != nil {
				t.Errorf("%s: y label %q is not a whole number (all %v)", name, l, ls)
			}
		}
		if p.Y.Min != 0 {
			t.Errorf("%s: y axis starts at %v, want 0", name, p.Y.Min)
		}
	}
	if got := labels(niceTicks{}.Ticks(0, 0.3)); strings.Join(got, " ") != "0.0 0.1 0.2 0.3" {
		t.Errorf("fractional ticks %v", got)
	}
}

// TestCategoryLabelsFitTheirSlots: the raft-failover categories used to run
// into each other.
func TestCategoryLabelsFitTheirSlots(t *testing.T) {
	cats := []string{"articles' program, articles' timing", "coord core, articles' timing",
		"coord core, paper's timing (5 nodes)", "coord core, coord defaults", "coord defaults, real processes"}
	p, err := Plot(lab.Chart{Name: "time", Kind: lab.Bars, Categories: cats,
		Series: []lab.Series{{Label: "median", Values: []float64{4, 2.7, 0.15, 1.2, 1.5}}}})
	if err != nil {
		t.Fatal(err)
	}
	slot := (chartWidth - vg.Points(60)) / vg.Length(len(cats))
	for _, tick := range p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max) {
		for _, line := range strings.Split(tick.Label, "\n") {
			if w := p.X.Tick.Label.Width(line); w > slot {
				t.Errorf("label line %q is %v wide, its slot %v", line, w, slot)
			}
		}
	}
}

// A bar's value label fits its bar's slot: shrunk when it is too wide, left
// out when even the smallest font is.
func TestBarLabelsFitTheirSlots(t *testing.T) {
	style := draw.TextStyle{Font: font.From(plot.DefaultFont, tickFont), Handler: plot.DefaultTextHandler}
	text := "0.00352"
	wide := style.Width(text)
	if got, ok := fitLabel(style, text, wide); !ok || got.Font.Size != style.Font.Size {
		t.Errorf("a label that fits: size %v, %v; want %v kept", got.Font.Size, ok, style.Font.Size)
	}
	got, ok := fitLabel(style, text, wide*0.7)
	if !ok || got.Width(text) > wide*0.7 || got.Font.Size < minLabelFont {
		t.Errorf("a label 1/0.7 too wide: size %v (%v wide, slot %v), %v", got.Font.Size, got.Width(text), wide*0.7, ok)
	}
	if _, ok := fitLabel(style, text, wide/10); ok {
		t.Errorf("a label ten times its slot's width is drawn")
	}
}

func TestFormatValue(t *testing.T) {
	for _, tc := range []struct {
		v     float64
		whole bool
		want  string
	}{{0, true, "0"}, {1000000, true, "1,000,000"}, {0.152, false, "0.152"}, {23.0769, false, "23.1"}, {4, false, "4"}} {
		if got := formatValue(tc.v, tc.whole); got != tc.want {
			t.Errorf("formatValue(%v, %v) = %q, want %q", tc.v, tc.whole, got, tc.want)
		}
	}
}

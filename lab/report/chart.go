package report

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"coord/lab"
)

// ErrChart means a chart's data cannot be drawn (no series, a NaN, a bar
// chart whose series do not match its categories).
var ErrChart = errors.New("report: bad chart")

// palette colours series in order: the articles' version first (a warm red),
// coord's second (a blue), then others.
var palette = []color.NRGBA{
	{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

func seriesColor(i int, alpha uint8) color.NRGBA {
	c := palette[i%len(palette)]
	c.A = alpha
	return c
}

// WriteFiles writes doc as lab.json into dir, creating dir if needed, and one
// PNG per chart named EXPERIMENT-CHART.png. It returns the paths written. A
// chart that cannot be drawn is reported in the error after the others are
// written.
func WriteFiles(dir string, doc Document) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: output directory: %w", err)
	}
	jsonPath := filepath.Join(dir, "lab.json")
	f, err := os.Create(jsonPath)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	err = WriteJSON(f, doc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("report: write %s: %w", jsonPath, err)
	}
	written := []string{jsonPath}
	var errs []error
	for _, r := range doc.Results {
		for _, c := range r.Charts {
			path := filepath.Join(dir, r.Experiment+"-"+c.Name+".png")
			if err := SaveChart(path, c); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", r.Experiment, err))
				continue
			}
			written = append(written, path)
		}
	}
	return written, errors.Join(errs...)
}

// SaveChart draws c into a PNG file at path.
func SaveChart(path string, c lab.Chart) error {
	p, err := Plot(c)
	if err != nil {
		return err
	}
	if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, path); err != nil {
		return fmt.Errorf("report: save %s: %w", path, err)
	}
	return nil
}

// Plot builds the gonum plot for c.
func Plot(c lab.Chart) (*plot.Plot, error) {
	if len(c.Series) == 0 {
		return nil, fmt.Errorf("%w: %q has no series", ErrChart, c.Name)
	}
	for _, s := range c.Series {
		for _, v := range s.Values {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("%w: %q series %q holds %v", ErrChart, c.Name, s.Label, v)
			}
		}
	}
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.Legend.Top = true
	var err error
	switch c.Kind {
	case lab.Trials:
		err = addTrials(p, c)
	case lab.Histogram:
		err = addHistogram(p, c)
	case lab.Bars:
		err = addBars(p, c)
	default:
		err = fmt.Errorf("%w: %q has unknown kind %q", ErrChart, c.Name, c.Kind)
	}
	if err != nil {
		return nil, err
	}
	// Headroom above the data for the legend, which sits top right.
	p.Y.Max += (p.Y.Max - p.Y.Min) * 0.08 * float64(len(c.Series)+1)
	return p, nil
}

// addTrials draws each series as points joined by a thin line over the
// trial number (1-based).
func addTrials(p *plot.Plot, c lab.Chart) error {
	p.Add(plotter.NewGrid())
	for i, s := range c.Series {
		xys := make(plotter.XYs, len(s.Values))
		for j, v := range s.Values {
			xys[j] = plotter.XY{X: float64(j + 1), Y: v}
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("%w: %q: %v", ErrChart, c.Name, err)
		}
		line.Color = seriesColor(i, 0x80)
		points.Color = seriesColor(i, 0xff)
		points.GlyphStyle.Radius = vg.Points(2.5)
		p.Add(line, points)
		p.Legend.Add(s.Label, line, points)
	}
	return nil
}

// addHistogram draws the series' distributions over shared bins, so that
// they can be compared bar for bar.
func addHistogram(p *plot.Plot, c lab.Chart) error {
	lo, hi := math.Inf(1), math.Inf(-1)
	n := 0
	for _, s := range c.Series {
		for _, v := range s.Values {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("%w: %q has no values", ErrChart, c.Name)
	}
	bins := int(math.Min(30, math.Max(5, math.Ceil(math.Sqrt(float64(n))))))
	if hi == lo {
		lo, hi = lo-0.5, hi+0.5
	}
	width := (hi - lo) / float64(bins)
	for i, s := range c.Series {
		h := &plotter.Histogram{Width: width, FillColor: seriesColor(i, 0x99), LineStyle: plotter.DefaultLineStyle}
		h.LineStyle.Color = seriesColor(i, 0xff)
		for b := range bins {
			h.Bins = append(h.Bins, plotter.HistogramBin{Min: lo + float64(b)*width, Max: lo + float64(b+1)*width})
		}
		for _, v := range s.Values {
			b := min(int((v-lo)/width), bins-1)
			h.Bins[b].Weight++
		}
		p.Add(h)
		p.Legend.Add(s.Label, h)
	}
	return nil
}

// addBars draws one group of bars per category, a bar per series.
func addBars(p *plot.Plot, c lab.Chart) error {
	width := vg.Points(float64(40 / len(c.Series)))
	for i, s := range c.Series {
		if len(s.Values) != len(c.Categories) {
			return fmt.Errorf("%w: %q series %q has %d values for %d categories", ErrChart, c.Name, s.Label, len(s.Values), len(c.Categories))
		}
		bars, err := plotter.NewBarChart(plotter.Values(s.Values), width)
		if err != nil {
			return fmt.Errorf("%w: %q: %v", ErrChart, c.Name, err)
		}
		bars.Color = seriesColor(i, 0xff)
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(i)-float64(len(c.Series)-1)/2)
		p.Add(bars)
		p.Legend.Add(s.Label, bars)
	}
	p.NominalX(c.Categories...)
	return nil
}

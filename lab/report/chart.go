package report

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"coord/lab"
)

// ErrChart means a chart's data cannot be drawn (no series, a NaN, a bar
// chart whose series do not match its categories).
var ErrChart = errors.New("report: bad chart")

// The size of a chart: the plot, then its legend in a strip below it, never
// over the data. Drawn at twice the screen's usual resolution, so that it is
// sharp in a browser at chartWidth.
const (
	chartWidth  = 18 * vg.Centimeter
	plotHeight  = 10 * vg.Centimeter
	chartDPI    = 192
	legendFont  = 10 // points
	tickFont    = 9
	labelFont   = 10
	titleFont   = 12
	legendGap   = 3 // points between legend rows
	logRatioMin = 10
)

// palette colours series in order: the articles' version first (a warm red),
// coord's second (a blue), then others. shapes gives each series its own
// glyph too, so that a series stays visible (and tellable in grey) where it
// sits on another.
var (
	palette = []color.NRGBA{
		{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	}
	shapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.TriangleGlyph{}, draw.SquareGlyph{}, draw.CrossGlyph{}, draw.RingGlyph{}}
)

func seriesColor(i int, alpha uint8) color.NRGBA {
	c := palette[i%len(palette)]
	c.A = alpha
	return c
}

// WriteFiles writes doc into dir, creating dir if needed: lab.json, one PNG
// per chart named EXPERIMENT-CHART.png, and report.html, one page that holds
// the summary, every result and every chart (embedded, so it reads in a
// browser without a server and survives being mailed). It returns the paths
// written. A chart that cannot be drawn is reported in the error after the
// rest are written.
func WriteFiles(dir string, doc Document) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: output directory: %w", err)
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, doc); err != nil {
		return nil, fmt.Errorf("report: encode lab.json: %w", err)
	}
	jsonPath := filepath.Join(dir, "lab.json")
	if err := os.WriteFile(jsonPath, buf.Bytes(), 0o644); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	written := []string{jsonPath}
	var errs []error
	images := map[*lab.Chart][]byte{}
	for _, r := range doc.Results {
		for i := range r.Charts {
			c := &r.Charts[i]
			png, err := RenderPNG(*c)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", r.Experiment, err))
				continue
			}
			path := filepath.Join(dir, ChartFile(r, *c))
			if err := os.WriteFile(path, png, 0o644); err != nil {
				return written, fmt.Errorf("report: %w", err)
			}
			images[c] = png
			written = append(written, path)
		}
	}
	buf.Reset()
	if err := writeHTML(&buf, doc, images); err != nil {
		return written, fmt.Errorf("report: report.html: %w", err)
	}
	htmlPath := filepath.Join(dir, "report.html")
	if err := os.WriteFile(htmlPath, buf.Bytes(), 0o644); err != nil {
		return written, fmt.Errorf("report: %w", err)
	}
	written = append(written, htmlPath)
	return written, errors.Join(errs...)
}

// ChartFile is the file name WriteFiles gives a result's chart.
func ChartFile(r *lab.Result, c lab.Chart) string { return r.Experiment + "-" + c.Name + ".png" }

// SaveChart draws c into a PNG file at path.
func SaveChart(path string, c lab.Chart) error {
	png, err := RenderPNG(c)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		return fmt.Errorf("report: save %s: %w", path, err)
	}
	return nil
}

// RenderPNG draws c as a PNG image: the plot, with its legend in a strip
// below the axes.
func RenderPNG(c lab.Chart) ([]byte, error) {
	p, legend, err := build(c)
	if err != nil {
		return nil, err
	}
	legendHeight := legendStripHeight(legend, len(c.Series))
	img := vgimg.NewWith(vgimg.UseWH(chartWidth, plotHeight+legendHeight), vgimg.UseDPI(chartDPI),
		vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	p.Draw(draw.Crop(dc, 0, 0, legendHeight, 0))
	// The legend's strip, left-aligned under the data (past the y axis's
	// labels), top to bottom in series order.
	legend.Draw(draw.Crop(dc, vg.Points(48), 0, vg.Points(4), -plotHeight-vg.Points(2)))
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("report: encode %q: %w", c.Name, err)
	}
	return buf.Bytes(), nil
}

func legendStripHeight(l plot.Legend, entries int) vg.Length {
	row := l.TextStyle.Rectangle("Xg").Size().Y
	return vg.Length(entries)*(row+legendGap) + vg.Points(10)
}

// Plot builds the gonum plot for c, without a legend: RenderPNG draws the
// legend in a strip of its own below the plot, never over the data.
func Plot(c lab.Chart) (*plot.Plot, error) {
	p, _, err := build(c)
	return p, err
}

// build returns the plot for c and its legend, drawn apart.
func build(c lab.Chart) (*plot.Plot, plot.Legend, error) {
	if len(c.Series) == 0 {
		return nil, plot.Legend{}, fmt.Errorf("%w: %q has no series", ErrChart, c.Name)
	}
	for _, s := range c.Series {
		for _, v := range s.Values {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, plot.Legend{}, fmt.Errorf("%w: %q series %q holds %v", ErrChart, c.Name, s.Label, v)
			}
		}
	}
	p := plot.New()
	p.Title.Text = c.Title
	p.Title.TextStyle.Font.Size = titleFont
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text, p.Y.Label.Text = c.XLabel, c.YLabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = labelFont
		a.Tick.Label.Font.Size = tickFont
	}
	legend := plot.NewLegend()
	legend.TextStyle.Font.Size = legendFont
	legend.Top, legend.Left = true, true
	legend.Padding = legendGap
	legend.ThumbnailWidth = vg.Points(16)
	var err error
	switch c.Kind {
	case lab.Trials:
		err = addTrials(p, &legend, c)
	case lab.Histogram:
		err = addHistogram(p, &legend, c)
	case lab.Bars:
		err = addBars(p, &legend, c)
	default:
		err = fmt.Errorf("%w: %q has unknown kind %q", ErrChart, c.Name, c.Kind)
	}
	if err != nil {
		return nil, plot.Legend{}, err
	}
	return p, legend, nil
}

// addTrials draws each series as points over the trial number (1-based),
// unjoined: trials are separate runs, not a time series. Series sit side by
// side within a trial and each has its own glyph, so that equal values do
// not hide one another. A y axis whose positive values span a decade or
// more is logarithmic (milliseconds beside seconds); otherwise it starts at
// zero.
func addTrials(p *plot.Plot, legend *plot.Legend, c lab.Chart) error {
	p.Add(horizontalGrid())
	longest := 0
	for _, s := range c.Series {
		longest = max(longest, len(s.Values))
	}
	if longest == 0 {
		return fmt.Errorf("%w: %q has no values", ErrChart, c.Name)
	}
	step := math.Min(0.25, 0.8/float64(len(c.Series)))
	for i, s := range c.Series {
		offset := (float64(i) - float64(len(c.Series)-1)/2) * step
		xys := make(plotter.XYs, len(s.Values))
		for j, v := range s.Values {
			xys[j] = plotter.XY{X: float64(j+1) + offset, Y: v}
		}
		points, err := plotter.NewScatter(xys)
		if err != nil {
			return fmt.Errorf("%w: %q: %v", ErrChart, c.Name, err)
		}
		points.GlyphStyle = draw.GlyphStyle{Color: seriesColor(i, 0xff), Radius: vg.Points(3), Shape: shapes[i%len(shapes)]}
		p.Add(points)
		legend.Add(s.Label, points)
	}
	p.X.Min, p.X.Max = 0.5, float64(longest)+0.5
	p.X.Tick.Marker = niceTicks{whole: true}
	setValueAxis(&p.Y, allValues(c), true)
	return nil
}

// addHistogram draws the series' distributions over shared bins, each
// series' bar beside the others' within a bin rather than in front of them.
// With Percent set, bars are shares of each series' values, so that series
// of different sizes compare.
func addHistogram(p *plot.Plot, legend *plot.Legend, c lab.Chart) error {
	values := allValues(c)
	if len(values) == 0 {
		return fmt.Errorf("%w: %q has no values", ErrChart, c.Name)
	}
	lo, hi := minMax(values)
	bins := int(math.Min(20, math.Max(5, math.Ceil(math.Sqrt(float64(len(values)))))))
	if hi == lo {
		lo, hi = lo-0.5, hi+0.5
	}
	width := (hi - lo) / float64(bins)
	slot := width / float64(len(c.Series))
	p.Add(horizontalGrid())
	var heights []float64
	for i, s := range c.Series {
		h := &plotter.Histogram{Width: width, FillColor: seriesColor(i, 0xcc), LineStyle: plotter.DefaultLineStyle}
		h.LineStyle.Color = seriesColor(i, 0xff)
		h.LineStyle.Width = vg.Points(0.5)
		for b := range bins {
			left := lo + float64(b)*width + float64(i)*slot
			h.Bins = append(h.Bins, plotter.HistogramBin{Min: left, Max: left + slot})
		}
		for _, v := range s.Values {
			b := min(int((v-lo)/width), bins-1)
			h.Bins[b].Weight++
		}
		if c.Percent && len(s.Values) > 0 {
			for b := range h.Bins {
				h.Bins[b].Weight *= 100 / float64(len(s.Values))
			}
		}
		for _, b := range h.Bins {
			heights = append(heights, b.Weight)
		}
		p.Add(h)
		legend.Add(s.Label, h)
	}
	p.X.Min, p.X.Max = lo, hi
	p.X.Tick.Marker = niceTicks{whole: wholeNumbers(values)}
	setValueAxis(&p.Y, heights, false)
	if !c.Percent {
		p.Y.Tick.Marker = niceTicks{whole: true}
	}
	return nil
}

// addBars draws one group of bars per category, a bar per series, each
// labelled with its value; a zero bar is a stub on the axis with its "0",
// so that it reads as measured and zero rather than missing. Category
// labels are wrapped to their slot's width.
func addBars(p *plot.Plot, legend *plot.Legend, c lab.Chart) error {
	if len(c.Categories) == 0 {
		return fmt.Errorf("%w: %q has no categories", ErrChart, c.Name)
	}
	for _, s := range c.Series {
		if len(s.Values) != len(c.Categories) {
			return fmt.Errorf("%w: %q series %q has %d values for %d categories", ErrChart, c.Name, s.Label, len(s.Values), len(c.Categories))
		}
	}
	p.Add(horizontalGrid())
	values := allValues(c)
	bars := &groupedBars{series: c.Series, whole: wholeNumbers(values)}
	p.Add(bars)
	for i, s := range c.Series {
		legend.Add(s.Label, swatch(seriesColor(i, 0xff)))
	}
	// The slot a category has on the x axis, less a margin, in the tick
	// labels' font: wrap each label to it.
	slot := (chartWidth - vg.Points(60)) / vg.Length(len(c.Categories))
	names := make([]string, len(c.Categories))
	for i, name := range c.Categories {
		names[i] = wrapToWidth(name, p.X.Tick.Label, slot*0.92)
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(c.Categories))-0.5
	setValueAxis(&p.Y, values, false)
	if bars.whole {
		p.Y.Tick.Marker = niceTicks{whole: true}
	}
	// Headroom for the value labels over the tallest bar.
	p.Y.Max += (p.Y.Max - p.Y.Min) * 0.08
	return nil
}

// setValueAxis fits a value axis to values: logarithmic over whole decades
// when allowLog and every value is positive and they span logRatioMin or
// more; otherwise linear from zero (or from the least value, when some are
// negative) with whole-number ticks for whole-number data. An axis whose
// values are all zero still shows a unit range, with the zeros at its foot.
func setValueAxis(a *plot.Axis, values []float64, allowLog bool) {
	lo, hi := minMax(values)
	if allowLog && lo > 0 && hi/lo >= logRatioMin {
		a.Scale = plot.LogScale{}
		a.Tick.Marker = logTicks{}
		a.Min = math.Pow(10, math.Floor(math.Log10(lo)))
		a.Max = math.Pow(10, math.Ceil(math.Log10(hi)))
		return
	}
	a.Min, a.Max = math.Min(0, lo), math.Max(0, hi)
	if a.Max == a.Min {
		a.Max = a.Min + 1
	}
	a.Max += (a.Max - a.Min) * 0.05
	a.Tick.Marker = niceTicks{whole: wholeNumbers(values)}
}

func allValues(c lab.Chart) []float64 {
	var all []float64
	for _, s := range c.Series {
		all = append(all, s.Values...)
	}
	return all
}

func minMax(values []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range values {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	return lo, hi
}

// wholeNumbers reports whether every value is an integer: counts, which
// are labelled without decimals.
func wholeNumbers(values []float64) bool {
	for _, v := range values {
		if v != math.Trunc(v) {
			return false
		}
	}
	return true
}

func horizontalGrid() *plotter.Grid {
	g := plotter.NewGrid()
	g.Vertical.Color = nil
	g.Horizontal.Color = color.Gray{Y: 0xdd}
	return g
}

// wrapToWidth breaks text at spaces into lines no wider than width in the
// style's font; a word wider than width keeps a line of its own.
func wrapToWidth(text string, style interface{ Width(string) vg.Length }, width vg.Length) string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
			line = word
		case style.Width(line+" "+word) <= width:
			line += " " + word
		default:
			lines, line = append(lines, line), word
		}
	}
	return strings.Join(append(lines, line), "\n")
}

// formatValue formats a value for a tick or a bar's label: whole numbers
// with thousands separators, others with three significant digits.
func formatValue(v float64, whole bool) string {
	if whole || v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return commas(int64(math.Round(v)))
	}
	s := fmt.Sprintf("%.3g", v)
	if strings.ContainsAny(s, "e") {
		s = fmt.Sprintf("%g", v)
	}
	return s
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// niceTicks labels a linear axis at 1, 2 or 5 times a power of ten, about
// five labels in all, with as few decimals as the step needs; whole puts
// them on whole numbers only (counts: never "2.50 trials").
type niceTicks struct{ whole bool }

// Ticks returns the axis's labelled ticks between lo and hi.
func (t niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi <= lo {
		return []plot.Tick{{Value: lo, Label: formatValue(lo, t.whole)}}
	}
	step := niceStep((hi - lo) / 5)
	if t.whole {
		step = math.Max(1, math.Round(step))
	}
	decimals := max(0, int(-math.Floor(math.Log10(step))))
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		label := fmt.Sprintf("%.*f", decimals, v)
		if decimals == 0 {
			label = commas(int64(math.Round(v)))
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: label})
	}
	return ticks
}

// niceStep rounds a raw step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	power := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*power >= raw {
			return m * power
		}
	}
	return 10 * power
}

// logTicks labels a logarithmic axis at each power of ten ("0.001", "1",
// "1,000") with unlabelled ticks between.
type logTicks struct{}

// Ticks returns the axis's ticks between lo and hi, both positive.
func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for decade := math.Floor(math.Log10(lo)); decade <= math.Ceil(math.Log10(hi)); decade++ {
		base := math.Pow(10, decade)
		ticks = append(ticks, plot.Tick{Value: base, Label: formatDecade(decade)})
		for m := 2.0; m < 10; m++ {
			ticks = append(ticks, plot.Tick{Value: m * base})
		}
	}
	return ticks
}

func formatDecade(decade float64) string {
	if decade >= 0 {
		return commas(int64(math.Round(math.Pow(10, decade))))
	}
	return fmt.Sprintf("%.*f", int(-decade), math.Pow(10, decade))
}

// groupedBars draws bars side by side within each category, each labelled
// with its value above it.
type groupedBars struct {
	series []lab.Series
	whole  bool
}

const groupWidth = 0.8 // of a category's slot

// Plot implements plot.Plotter.
func (g *groupedBars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	n := float64(len(g.series))
	bar := groupWidth / n
	labelStyle := p.X.Tick.Label
	labelStyle.Font.Size = font.Length(tickFont)
	labelStyle.XAlign = draw.XCenter
	labelStyle.YAlign = draw.YBottom
	for i, s := range g.series {
		fill := seriesColor(i, 0xff)
		for j, v := range s.Values {
			left := float64(j) - groupWidth/2 + float64(i)*bar
			x0, x1 := trX(left+bar*0.06), trX(left+bar*0.94)
			base, top := trY(math.Max(0, p.Y.Min)), trY(v)
			if v == 0 {
				// A stub on the axis: measured and zero, not missing.
				top = base + vg.Points(2)
			}
			rect := []vg.Point{{X: x0, Y: base}, {X: x0, Y: top}, {X: x1, Y: top}, {X: x1, Y: base}}
			c.FillPolygon(fill, c.ClipPolygonY(rect))
			// The label may be as wide as the bar's slot, no wider: beside
			// it, another bar's label (raft-failover's millisecond bars ran
			// into each other).
			text := formatValue(v, g.whole)
			if style, ok := fitLabel(labelStyle, text, trX(left+bar)-trX(left)); ok {
				c.FillText(style, vg.Point{X: (x0 + x1) / 2, Y: maxLength(top, base) + vg.Points(2)}, text)
			}
		}
	}
}

// minLabelFont is the smallest font a bar's value label shrinks to; a label
// that does not fit its bar's slot even so is left out (the JSON results
// and the table have every value).
const minLabelFont = 5

// fitLabel returns style with its font shrunk, if need be, so that text is
// at most width wide, or false if even the smallest font is too wide.
func fitLabel(style draw.TextStyle, text string, width vg.Length) (draw.TextStyle, bool) {
	for style.Width(text) > width {
		if style.Font.Size <= minLabelFont {
			return style, false
		}
		style.Font.Size = max(style.Font.Size-0.5, minLabelFont)
	}
	return style, true
}

func maxLength(a, b vg.Length) vg.Length {
	if a > b {
		return a
	}
	return b
}

// DataRange implements plot.DataRanger.
func (g *groupedBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	ymin, ymax = 0, 0
	for _, s := range g.series {
		for _, v := range s.Values {
			ymin, ymax = math.Min(ymin, v), math.Max(ymax, v)
		}
	}
	return -0.5, float64(len(g.series[0].Values)) - 0.5, ymin, ymax
}

// swatch is a legend thumbnail: a filled square in the series' colour.
type swatch color.NRGBA

// Thumbnail implements plot.Thumbnailer.
func (s swatch) Thumbnail(c *draw.Canvas) {
	side := c.Max.Y - c.Min.Y
	pts := []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Min.X, Y: c.Max.Y}, {X: c.Min.X + side, Y: c.Max.Y}, {X: c.Min.X + side, Y: c.Min.Y}}
	c.FillPolygon(color.NRGBA(s), pts)
}

package report_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"coord/lab"
	"coord/lab/report"
)

func sampleResults() []*lab.Result {
	return []*lab.Result{
		{
			Experiment: "race", Rung: lab.Threads, Quick: true, Params: lab.Params{Trials: 3, Procs: 10}, Seed: 7,
			Articles: "never a million", Original: "min 990,000, median 995,000, max 999,000 (band 0.9%)",
			Coord: "1,000,000 in 3/3 runs", Verdict: lab.Verdict{Outcome: lab.Reproduced, Reason: "wrong in 3 of 3"},
			Row:     lab.Row{Shows: "counter++ unguarded", Articles: "never 1,000,000", Original: "lost 12%, 9/10", Coord: "1,000,000 3/3"},
			Details: []lab.Detail{{Label: "totals", Value: "990,000 995,000 999,000"}},
			Charts: []lab.Chart{
				{Name: "totals", Title: "t", XLabel: "run", YLabel: "total", Kind: lab.Trials,
					Series: []lab.Series{{Label: "a", Values: []float64{1, 2, 3}}, {Label: "b", Values: []float64{3, 3, 3}}}},
				{Name: "hist", Title: "h", XLabel: "x", YLabel: "n", Kind: lab.Histogram,
					Series: []lab.Series{{Label: "a", Values: []float64{1, 1, 2, 5}}, {Label: "b", Values: []float64{4, 4}}}},
				{Name: "bars", Title: "b", XLabel: "x", YLabel: "y", Kind: lab.Bars, Categories: []string{"p", "q"},
					Series: []lab.Series{{Label: "a", Values: []float64{1, 2}}, {Label: "b", Values: []float64{2, 0}}}},
			},
		},
		{
			// No Row: the table falls back to the sentences, cut to fit.
			Experiment: "exclusive-create", Rung: lab.Processes,
			Articles: "kill -9: 9.53 s leaderless; SIGTERM: 0.31 s, and a long tail of words after it",
			Original: "kill -9: 9.8 s", Coord: "kill -9: 0.01 s, SIGTERM: 0.008 s (medians, same 9 s TTL)",
			Verdict: lab.Verdict{Outcome: lab.Unavailable, Reason: "two leaders at once <script>"},
		},
		{
			Experiment: "failover", Rung: lab.Processes, Articles: "9.53 s and 0.31 s",
			Original: "kill -9: 9.8 s", Coord: "kill -9: 0.01 s",
			Row:     lab.Row{Shows: "gap: kill -9/TERM", Articles: "9.53 s / 0.31 s", Original: "9.8 s / 1.1 s", Coord: "10 ms / 8.0 ms"},
			Verdict: lab.Verdict{Outcome: lab.Failed, Reason: "two leaders at once"},
		},
	}
}

// TestWriteSummary checks the summary as a reader meets it cold: one line
// per experiment within 100 columns, with every column named, then the
// legend, then why each verdict.
func TestWriteSummary(t *testing.T) {
	var buf bytes.Buffer
	if err := report.WriteSummary(&buf, sampleResults()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	lines := strings.Split(out, "\n")
	for i, line := range lines {
		if n := len([]rune(line)); n > report.SummaryWidth {
			t.Errorf("line %d is %d characters wide: %q", i+1, n, line)
		}
	}
	for _, column := range []string{"experiment", "shows", "articles", "original now", "coord now", "verdict"} {
		if !strings.Contains(lines[0], column) {
			t.Errorf("header %q lacks %q", lines[0], column)
		}
	}
	for i, want := range []string{
		"race              counter++ unguarded  never 1,000,000  lost 12%, 9/10",
		"exclusive-create",
		"failover          gap: kill -9/TERM    9.53 s / 0.31 s  9.8 s / 1.1 s",
	} {
		if row := lines[2+i]; !strings.HasPrefix(row, want) {
			t.Errorf("row %d = %q, want it to start %q", i+1, row, want)
		}
	}
	if row := lines[3]; !strings.Contains(row, "…") || !strings.HasSuffix(row, "unavailable") {
		t.Errorf("a row without short cells should show its sentences cut to fit: %q", row)
	}
	if lines[5] != "" {
		t.Errorf("the table is not one line per experiment: line 6 is %q", lines[5])
	}
	order := []string{"3 experiment(s): 1 reproduced, 1 failed, 1 unavailable.", "Columns", "original now  the articles' program",
		"Verdicts", "differs       coord was correct", "Why", "race, reproduced: wrong in 3 of 3", "failover, failed: two leaders at once"}
	at := 0
	for _, want := range order {
		i := strings.Index(out[at:], want)
		if i < 0 {
			t.Fatalf("summary lacks %q after offset %d:\n%s", want, at, out)
		}
		at += i
	}
}

func TestFitWidthsCutsTheWidestMiddleColumn(t *testing.T) {
	var buf bytes.Buffer
	r := sampleResults()[1]
	r.Experiment = "a-name-of-16-chr"
	r.Articles = strings.Repeat("word ", 40)
	if err := report.WriteSummary(&buf, []*lab.Result{r}); err != nil {
		t.Fatal(err)
	}
	row := strings.Split(buf.String(), "\n")[2]
	if n := len([]rune(row)); n > report.SummaryWidth || !strings.HasPrefix(row, "a-name-of-16-chr  ") || !strings.HasSuffix(row, "unavailable") {
		t.Errorf("row %q (%d characters): want the name and verdict whole within %d", row, n, report.SummaryWidth)
	}
}

func TestWriteResultAndList(t *testing.T) {
	var buf bytes.Buffer
	if err := report.WriteResult(&buf, sampleResults()[0]); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"== race (threads) - quick, 3 trials, 10 procs, seed 7", "verdict", "reproduced: wrong in 3 of 3", "totals"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("result block lacks %q:\n%s", want, buf.String())
		}
	}
	buf.Reset()
	exps := []lab.Experiment{{Name: "race", Rung: lab.Threads, Short: "counter"}, {Name: "failover", Rung: lab.Processes, Short: "gap"}}
	if err := report.WriteList(&buf, exps); err != nil {
		t.Fatal(err)
	}
	if want := "threads:\n  race              counter\nprocesses:\n  failover          gap\n"; buf.String() != want {
		t.Errorf("list = %q, want %q", buf.String(), want)
	}
}

func TestWriteJSONRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	doc := report.NewDocument(time.Now(), sampleResults())
	if err := report.WriteJSON(&buf, doc); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Tool    string `json:"tool"`
		Machine struct {
			GOMAXPROCS int `json:"gomaxprocs"`
		} `json:"machine"`
		Results []struct {
			Experiment string      `json:"experiment"`
			Rung       string      `json:"rung"`
			Verdict    lab.Verdict `json:"verdict"`
		} `json:"results"`
	}
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatalf("not one JSON document: %v\n%s", err, buf.String())
	}
	if back.Tool != "coord lab" || back.Machine.GOMAXPROCS < 1 || len(back.Results) != 3 ||
		back.Results[0].Rung != "threads" || back.Results[2].Verdict.Outcome != lab.Failed {
		t.Errorf("decoded %+v", back)
	}
	buf.Reset()
	if err := report.WriteJSON(&buf, report.NewDocument(time.Now(), nil)); err != nil || !bytes.Contains(buf.Bytes(), []byte(`"results": []`)) {
		t.Errorf("an empty run should still have a results array: %v %s", err, buf.String())
	}
}

func TestWriteFilesDrawsEveryChart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	paths, err := report.WriteFiles(dir, report.NewDocument(time.Now(), sampleResults()))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"lab.json", "race-totals.png", "race-hist.png", "race-bars.png", "report.html"}
	if len(paths) != len(want) {
		t.Fatalf("wrote %v, want %v", paths, want)
	}
	for i, p := range paths {
		if filepath.Base(p) != want[i] {
			t.Errorf("file %d = %s, want %s", i, filepath.Base(p), want[i])
		}
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 {
			t.Errorf("%s: %v (%d bytes)", p, err, len(data))
		}
		if strings.HasSuffix(p, ".png") && !bytes.HasPrefix(data, []byte("\x89PNG")) {
			t.Errorf("%s is not a PNG", p)
		}
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	images := checkSelfContained(t, string(page))
	if len(images) != 3 {
		t.Fatalf("report.html embeds %d images, want the 3 charts", len(images))
	}
	for i, name := range want[1:4] {
		file, _ := os.ReadFile(filepath.Join(dir, name))
		if !bytes.Equal(images[i], file) {
			t.Errorf("image %d in report.html is not %s", i+1, name)
		}
	}
	for _, text := range []string{"<th>original now</th>", "lost 12%, 9/10", "<h3>Verdicts</h3>", "990,000 995,000 999,000",
		"two leaders at once &lt;script&gt;", `id="failover"`, `href="#race"`} {
		if !strings.Contains(string(page), text) {
			t.Errorf("report.html lacks %q", text)
		}
	}
}

// checkSelfContained fails t unless page fetches nothing: no URL that
// leaves the file, no script, and every image a PNG in a data: URL. It
// returns the images, decoded, in page order.
func checkSelfContained(t *testing.T, page string) [][]byte {
	t.Helper()
	for _, bad := range []string{"http://", "https://", "//cdn", "<script", "<link", "@import", "url("} {
		if strings.Contains(page, bad) {
			t.Errorf("report.html contains %q: it must need nothing outside itself", bad)
		}
	}
	var images [][]byte
	for _, m := range regexp.MustCompile(`<img [^>]*src="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		// An attribute's value is HTML: "&#43;" is a "+" to the browser.
		data, ok := strings.CutPrefix(html.UnescapeString(m[1]), "data:image/png;base64,")
		if !ok {
			t.Errorf("image source %.60q is not an embedded PNG", m[1])
			continue
		}
		png, err := base64.StdEncoding.DecodeString(data)
		if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
			t.Errorf("embedded image does not decode to a PNG: %v", err)
		}
		images = append(images, png)
	}
	if n := strings.Count(page, "<img "); n != len(images) {
		t.Errorf("%d <img> tags, %d embedded PNGs", n, len(images))
	}
	return images
}

func TestPlotRejectsBadCharts(t *testing.T) {
	for name, c := range map[string]lab.Chart{
		"no series":     {Name: "x", Kind: lab.Trials},
		"NaN":           {Name: "x", Kind: lab.Trials, Series: []lab.Series{{Values: []float64{math.NaN()}}}},
		"unknown":       {Name: "x", Kind: "pie", Series: []lab.Series{{Values: []float64{1}}}},
		"bars count":    {Name: "x", Kind: lab.Bars, Categories: []string{"a"}, Series: []lab.Series{{Values: []float64{1, 2}}}},
		"no categories": {Name: "x", Kind: lab.Bars, Series: []lab.Series{{Values: nil}}},
		"empty hist":    {Name: "x", Kind: lab.Histogram, Series: []lab.Series{{Values: nil}}},
		"empty trials":  {Name: "x", Kind: lab.Trials, Series: []lab.Series{{Values: nil}}},
	} {
		if _, err := report.Plot(c); !errors.Is(err, report.ErrChart) {
			t.Errorf("%s: Plot error = %v, want ErrChart", name, err)
		}
		if _, err := report.RenderPNG(c); !errors.Is(err, report.ErrChart) {
			t.Errorf("%s: RenderPNG error = %v, want ErrChart", name, err)
		}
	}
	bad := sampleResults()[:1]
	bad[0].Charts = append(bad[0].Charts, lab.Chart{Name: "broken", Title: "the broken one", Kind: "pie", Series: []lab.Series{{Values: []float64{1}}}})
	dir := t.TempDir()
	paths, err := report.WriteFiles(dir, report.NewDocument(time.Now(), bad))
	if !errors.Is(err, report.ErrChart) || len(paths) != 5 {
		t.Errorf("WriteFiles with one bad chart: %d files, %v; want the other 5 and ErrChart", len(paths), err)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	if !strings.Contains(string(page), "the broken one: not drawn") {
		t.Error("report.html does not say which chart could not be drawn")
	}
}

func TestProgressOnlyOnTerminals(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if report.Progress(f) != nil {
		t.Error("a progress bar for a regular file")
	}
	if report.Progress(nil) != nil {
		t.Error("a progress bar for no file")
	}
}

func TestPrepareDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := report.PrepareDir(dir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Errorf("PrepareDir left %v behind (%v)", entries, err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := report.PrepareDir(file); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("PrepareDir on a file = %v, want an error naming it", err)
	}
	if got := report.DefaultDir(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)); got != filepath.Join("lab-out", "20260304-050607") {
		t.Errorf("DefaultDir = %q", got)
	}
}

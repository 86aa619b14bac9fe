package report_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
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
			Experiment: "failover", Rung: lab.Processes, Articles: "9.53 s and 0.31 s",
			Original: "kill -9: 9.8 s", Coord: "kill -9: 0.01 s",
			Verdict: lab.Verdict{Outcome: lab.Failed, Reason: "two leaders at once"},
		},
	}
}

func TestWriteSummary(t *testing.T) {
	var buf bytes.Buffer
	if err := report.WriteSummary(&buf, sampleResults()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"experiment", "articles", "original (now)", "coord (now)", "verdict",
		"race", "reproduced", "failover", "failed", "2 experiments: 1 reproduced, 1 failed.", "failover failed: two leaders at once"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if len([]rune(line)) > 120 && !strings.HasPrefix(line, "  ") {
			t.Errorf("table line is %d characters wide: %q", len([]rune(line)), line)
		}
	}
	if strings.Contains(out, "race reproduced:") {
		t.Error("summary explains a reproduced verdict; only the others need a reason")
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
	if back.Tool != "coord lab" || back.Machine.GOMAXPROCS < 1 || len(back.Results) != 2 ||
		back.Results[0].Rung != "threads" || back.Results[1].Verdict.Outcome != lab.Failed {
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
	want := []string{"lab.json", "race-totals.png", "race-hist.png", "race-bars.png"}
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
}

func TestPlotRejectsBadCharts(t *testing.T) {
	for name, c := range map[string]lab.Chart{
		"no series":  {Name: "x", Kind: lab.Trials},
		"NaN":        {Name: "x", Kind: lab.Trials, Series: []lab.Series{{Values: []float64{math.NaN()}}}},
		"unknown":    {Name: "x", Kind: "pie", Series: []lab.Series{{Values: []float64{1}}}},
		"bars count": {Name: "x", Kind: lab.Bars, Categories: []string{"a"}, Series: []lab.Series{{Values: []float64{1, 2}}}},
		"empty hist": {Name: "x", Kind: lab.Histogram, Series: []lab.Series{{Values: nil}}},
	} {
		if _, err := report.Plot(c); !errors.Is(err, report.ErrChart) {
			t.Errorf("%s: Plot error = %v, want ErrChart", name, err)
		}
	}
	bad := sampleResults()[:1]
	bad[0].Charts = append(bad[0].Charts, lab.Chart{Name: "broken", Kind: "pie", Series: []lab.Series{{Values: []float64{1}}}})
	paths, err := report.WriteFiles(t.TempDir(), report.NewDocument(time.Now(), bad))
	if !errors.Is(err, report.ErrChart) || len(paths) != 4 {
		t.Errorf("WriteFiles with one bad chart: %d files, %v; want the other 4 and ErrChart", len(paths), err)
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

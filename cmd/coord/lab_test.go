package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLabList(t *testing.T) {
	code, out, stderr := runCLI(t, "lab", "list")
	if code != exitOK {
		t.Fatalf("lab list: exit %d, stderr %q", code, stderr)
	}
	for _, name := range []string{"race", "mutex", "granularity", "semaphore", "prodcons", "deadlock",
		"exclusive-create", "failover", "empty-file", "takeover-race", "paused-leader"} {
		if !strings.Contains(out, "\n  "+name+" ") {
			t.Errorf("lab list lacks %q:\n%s", name, out)
		}
	}
	if strings.Index(out, "threads:") > strings.Index(out, "processes:") {
		t.Errorf("rungs out of order:\n%s", out)
	}
}

func TestLabRunHelpSaysWhatToPredict(t *testing.T) {
	code, out, _ := runCLI(t, "lab", "run", "failover", "--help")
	if code != exitOK || !strings.Contains(out, "Predict before running") || !strings.Contains(out, "--trials") || !strings.Contains(out, "9.53 s") {
		t.Fatalf("lab run failover --help: exit %d\n%s", code, out)
	}
	_, out, _ = runCLI(t, "lab", "run", "prodcons", "--help")
	if strings.Contains(out, "--procs") {
		t.Errorf("prodcons has no --procs knob, but its help offers one:\n%s", out)
	}
}

func TestLabUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"lab", "run"},
		{"lab", "run", "no-such-experiment"},
		{"lab", "run", "semaphore", "--trials", "-1"},
		{"lab", "run", "semaphore", "--procs", "100000"},
		{"lab", "run", "prodcons", "--procs", "3"},
		{"lab", "run", "semaphore", "--trials", "many"},
		{"lab", "extra"},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, exitUsage, stderr)
		}
	}
}

// TestLabRunJSON runs one cheap experiment through the command and reads
// its JSON document.
func TestLabRunJSON(t *testing.T) {
	dir := t.TempDir()
	code, out, stderr := runCLI(t, "lab", "run", "semaphore", "--trials", "2", "--json", "--seed", "7", "--out", dir)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var doc struct {
		Tool    string `json:"tool"`
		Results []struct {
			Experiment string `json:"experiment"`
			Seed       uint64 `json:"seed"`
			Params     struct {
				Trials int `json:"trials"`
			} `json:"params"`
			Verdict struct {
				Outcome string `json:"outcome"`
			} `json:"verdict"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not one JSON document: %v\n%s", err, out)
	}
	if doc.Tool != "coord lab" || len(doc.Results) != 1 || doc.Results[0].Experiment != "semaphore" ||
		doc.Results[0].Seed != 7 || doc.Results[0].Params.Trials != 2 || doc.Results[0].Verdict.Outcome == "" {
		t.Errorf("document = %+v", doc)
	}
	if !strings.Contains(stderr, "wrote 3 file(s) to "+dir) {
		t.Errorf("stderr %q: want lab.json, one chart and report.html in %s", stderr, dir)
	}
}

func TestLabRunTableAndFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "results")
	code, out, stderr := runCLI(t, "lab", "run", "granularity", "--trials", "1", "--procs", "10", "--out", dir)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"granularity  lock per op or loop", "Columns", "Verdicts", "Why",
		"== granularity (threads)", "GOMAXPROCS", "Results: " + filepath.Join(dir, "report.html") + " (3 file(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "Why") > strings.Index(out, "== granularity") {
		t.Errorf("the details come before the summary:\n%s", out)
	}
	for _, name := range []string{"lab.json", "report.html", "granularity-time.png"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	// The summary, from the table's header to the end of the reasons, fits
	// in 100 columns.
	summary := out[strings.Index(out, "experiment  "):strings.Index(out, "== granularity")]
	for _, line := range strings.Split(summary, "\n") {
		if n := len([]rune(line)); n > 100 {
			t.Errorf("summary line of %d columns: %q", n, line)
		}
	}
	// report.html stands alone: no script, no URL out of the file, the one
	// chart embedded.
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"http:", "https:", "<script", "<link"} {
		if strings.Contains(string(page), bad) {
			t.Errorf("report.html contains %q", bad)
		}
	}
	if n, embedded := strings.Count(string(page), "<img "), strings.Count(string(page), `<img src="data:image/png;base64,`); n != 1 || embedded != 1 {
		t.Errorf("report.html has %d images, %d embedded: want the one chart, embedded", n, embedded)
	}
}

// TestLabOutMustBeWritable: a directory that cannot take the results is a
// usage error before anything runs, naming the flag and the path.
func TestLabOutMustBeWritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{file, filepath.Join(file, "below")} {
		code, out, stderr := runCLI(t, "lab", "run", "deadlock", "--out", dir)
		if code != exitUsage || !strings.Contains(stderr, "--out "+dir) {
			t.Errorf("--out %s: exit %d, stderr %q; want a usage error naming it", dir, code, stderr)
		}
		if strings.Contains(out, "deadlock  ") {
			t.Errorf("--out %s: the experiment ran before the check:\n%s", dir, out)
		}
	}
	if os.Geteuid() != 0 { // root writes anywhere
		locked := filepath.Join(t.TempDir(), "locked")
		if err := os.Mkdir(locked, 0o500); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := runCLI(t, "lab", "run", "deadlock", "--out", locked); code != exitUsage || !strings.Contains(stderr, "not writable") {
			t.Errorf("--out on a read-only directory: exit %d, stderr %q", code, stderr)
		}
	}
}

package rafttest

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "regenerate the transcripts under testdata/")

// TestTranscripts replays every scenario under testdata/ and compares it
// with its golden output.
func TestTranscripts(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			diff, err := RunFile(path, *rewrite)
			if err != nil {
				t.Fatal(err)
			}
			if diff != "" {
				t.Errorf("%s differs from its golden output (regenerate with -rewrite if intended):\n%s", path, diff)
			}
		})
	}
}

func TestScriptErrors(t *testing.T) {
	got := RunScript("> frobnicate\n> tick 9\n> bootstrap x\n> config elect=5\n> config prevote=maybe\n")
	for _, want := range []string{`unknown command "frobnicate"`, "no node 9", `node ID "x"`,
		`unknown config key "elect"`, "config prevote=maybe"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

package main

import (
	"bytes"
	"strings"
	"testing"
)

// runCLI runs the command in-process and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHelpListsGroups(t *testing.T) {
	code, out, _ := runCLI(t, "--help")
	if code != exitOK {
		t.Fatalf("--help exit code = %d, want 0", code)
	}
	for _, group := range []string{"lab", "elect", "run", "server", "cluster", "sim", "bench", "version"} {
		if !strings.Contains(out, "\n  "+group+" ") {
			t.Errorf("--help does not list %q:\n%s", group, out)
		}
	}
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		args       []string
		code       int
		stderrHas  string
		stderrHint bool
	}{
		{[]string{"version"}, exitOK, "", false},
		{[]string{"bogus"}, exitUsage, `unknown command "bogus"`, true},
		{[]string{"--bogus"}, exitUsage, "unknown flag: --bogus", true},
		{[]string{"version", "extra"}, exitUsage, "unknown command", true},
		{[]string{"--log-level", "loud", "version"}, exitUsage, "--log-level", true},
		{[]string{"--log-format", "xml", "version"}, exitUsage, "--log-format", true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, tt.args...)
			if code != tt.code {
				t.Fatalf("exit code = %d, want %d (stderr %q)", code, tt.code, stderr)
			}
			if !strings.Contains(stderr, tt.stderrHas) {
				t.Errorf("stderr %q does not contain %q", stderr, tt.stderrHas)
			}
			if hint := strings.Contains(stderr, "--help' for usage."); hint != tt.stderrHint {
				t.Errorf("hint shown = %v, want %v; stderr %q", hint, tt.stderrHint, stderr)
			}
			if lines := strings.Count(strings.TrimSpace(stderr), "\n") + 1; tt.code == exitUsage && lines != 2 {
				t.Errorf("usage error took %d lines, want an error line and a hint line: %q", lines, stderr)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runCLI(t, "version")
	if code != exitOK || !strings.HasPrefix(out, "coord ") || !strings.Contains(out, "\nrevision: ") {
		t.Fatalf("version: code %d, output %q", code, out)
	}
}

func TestLoggerFormats(t *testing.T) {
	var buf bytes.Buffer
	logger, err := newLogger(&buf, "json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	logger.Debug("hello", "k", 1)
	if !strings.HasPrefix(buf.String(), "{") || !strings.Contains(buf.String(), `"msg":"hello"`) {
		t.Fatalf("json log line = %q", buf.String())
	}
	buf.Reset()
	logger, err = newLogger(&buf, "text", "warn")
	if err != nil {
		t.Fatal(err)
	}
	logger.Info("dropped")
	logger.Warn("kept")
	if strings.Contains(buf.String(), "dropped") || !strings.Contains(buf.String(), "msg=kept") {
		t.Fatalf("text log at warn = %q", buf.String())
	}
}

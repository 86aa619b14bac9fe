package watches

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestValidateNamesTheField(t *testing.T) {
	valid := Config{Watches: 10, Nodes: 1, Dir: "/tmp", Binary: "/bin/coord", After: []time.Duration{time.Second}}
	if err := valid.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		change func(*Config)
		want   string
	}{
		"watches":     {func(c *Config) { c.Watches = 0 }, "watches 0"},
		"nodes":       {func(c *Config) { c.Nodes = 10 }, "nodes 10"},
		"max watches": {func(c *Config) { c.MaxWatches = -1 }, "max watches -1"},
		"binary":      {func(c *Config) { c.Binary = "" }, "Binary"},
		"after":       {func(c *Config) { c.After = []time.Duration{-time.Second} }, "after -1s"},
	} {
		cfg := valid
		c.change(&cfg)
		if err := cfg.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", name, err, c.want)
		}
	}
}

// The memory figures are this process's own VmRSS, read from /proc.
func TestRSSOfThisProcess(t *testing.T) {
	b, err := rss(os.Getpid())
	if err != nil || b < 1<<20 {
		t.Fatalf("rss %d, %v: want at least a MiB", b, err)
	}
	settled, err := settledRSS(context.Background(), os.Getpid())
	if err != nil || settled < 1<<20 {
		t.Fatalf("settled rss %d, %v", settled, err)
	}
	if _, err := rss(-1); err == nil {
		t.Fatal("rss of no process: no error")
	}
}

func TestWriteText(t *testing.T) {
	res := Result{Watches: 300, Waiting: 200, Refused: 100, BeforeBytes: 30 << 20, DuringBytes: 90 << 20,
		After: []Sample{{AfterSeconds: 1, Bytes: 40 << 20}}}
	var b bytes.Buffer
	if err := res.WriteText(&b, Config{Nodes: 1, MaxWatches: 200}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"(--http-max-watches 200, --http-max-connections default): 200 waited, 100 refused with 503, 0 failed",
		"before  30.0", "during  90.0", "1s after  40.0"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

package failover

import (
	"bytes"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestValidateNamesTheField(t *testing.T) {
	valid := DefaultConfig()
	valid.Binary, valid.Dir = "/bin/coord", "/tmp"
	if err := valid.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for name, c := range map[string]struct {
		change func(*Config)
		want   string
	}{
		"binary":          {func(c *Config) { c.Binary = "" }, "Binary and Dir"},
		"signal":          {func(c *Config) { c.Signals = []syscall.Signal{syscall.SIGHUP} }, "want SIGKILL or SIGTERM"},
		"trials":          {func(c *Config) { c.Trials = 0 }, "trials 0"},
		"baseline trials": {func(c *Config) { c.BaselineTrials = -1 }, "baseline trials -1"},
		"parallel":        {func(c *Config) { c.Parallel = 0 }, "parallel 0"},
		"contenders":      {func(c *Config) { c.Contenders = 1 }, "contenders 1"},
		"timings":         {func(c *Config) { c.Baseline.Watch = 0 }, "timings must be positive"},
		"ttl":             {func(c *Config) { c.TTL = 0 }, "ttl 0s"},
	} {
		cfg := valid
		c.change(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", name, err, c.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	s := Summarize("coord", syscall.SIGTERM.String(), []time.Duration{3 * ms, 1 * ms, 2 * ms}, []time.Duration{500 * time.Microsecond}, 1)
	if s.Trials != 3 || s.Failed != 1 || s.MinMS != 1 || s.MedianMS != 2 || s.P99MS != 3 || s.MaxMS != 3 || s.FromReleaseMedianMS != 0.5 {
		t.Fatalf("%+v", s)
	}
	if len(s.GapsMS) != 3 || s.GapsMS[0] != 3 {
		t.Fatalf("gaps %v: want them in the order measured", s.GapsMS)
	}
	if empty := Summarize("coord", "killed", nil, nil, 4); empty.Trials != 0 || empty.MedianMS != 0 || empty.Failed != 4 {
		t.Fatalf("no gaps: %+v", empty)
	}
}

// The report compares the medians and says whether coord met its
// targets: p99 under 50 ms after SIGKILL, under 10 ms after SIGTERM.
func TestWriteTextRatiosAndTargets(t *testing.T) {
	cfg := DefaultConfig()
	results := []Stats{
		{Impl: "coord", Signal: syscall.SIGKILL.String(), Trials: 10, MedianMS: 10, P99MS: 20},
		{Impl: "coord", Signal: syscall.SIGTERM.String(), Trials: 10, MedianMS: 5, P99MS: 12},
		{Impl: "articles", Signal: syscall.SIGKILL.String(), Trials: 10, MedianMS: 9000, P99MS: 12000},
	}
	var b bytes.Buffer
	WriteText(&b, cfg, results)
	out := b.String()
	for _, want := range []string{
		"SIGKILL: the articles' median gap is 900x coord's",
		"SIGKILL: target met: p99 20.00ms, below 50ms",
		"SIGTERM: target missed: p99 12.00ms, not below 10ms",
		"articles  SIGKILL       10     0.00ms      9.00s     12.00s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "no target applies") {
		t.Errorf("the file store has targets:\n%s", out)
	}
	// Another store gets no verdict: its gap after SIGKILL is its TTL.
	cfg.Store = "redis://127.0.0.1:6379/0"
	b.Reset()
	WriteText(&b, cfg, results)
	if out := b.String(); strings.Contains(out, "target met") || strings.Contains(out, "target missed") || !strings.Contains(out, "no target applies to this store") {
		t.Errorf("redis report:\n%s", out)
	}
	if got := CheckTargets("file:///tmp/x.lock", results); len(got) != 2 || !got[0].Met || got[1].Met {
		t.Errorf("CheckTargets(file) = %+v; want SIGKILL met, SIGTERM missed", got)
	}
	if got := CheckTargets("postgres://x/y", results); got != nil {
		t.Errorf("CheckTargets(postgres) = %+v; want none", got)
	}
}

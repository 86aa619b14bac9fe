package localcluster

import (
	"strings"
	"testing"
	"time"
)

// The report prints each series' percentiles and the fault run's counts,
// and leaves out what was not measured.
func TestFailoverReportText(t *testing.T) {
	ms := time.Millisecond
	r := FailoverBenchReport{Nodes: 3, Tick: "100ms", Machine: "test machine", WriteP50: 4 * ms,
		Series: []FailoverSeries{{Label: "leader killed (SIGKILL), hint", Gaps: []time.Duration{30 * ms, 10 * ms, 20 * ms}, Terms: []uint64{1, 2, 1}}}}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"leader killed (SIGKILL), hint", "10.00 ms", "20.00 ms", "30.00 ms", "4.00 ms", "test machine"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "fault run") {
		t.Errorf("a report without a fault run prints one:\n%s", out)
	}
	r = FailoverBenchReport{Nodes: 3, Tick: "100ms", Faults: []FaultRun{{Label: "hint on (defaults)", Seconds: 60, Cuts: 7, Partitions: 9, Elections: 3, LeaderChanges: 2}}}
	b.Reset()
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	if strings.Contains(out, "acknowledged writes") || !strings.Contains(out, "hint on (defaults)") {
		t.Errorf("a fault-run-only report:\n%s", out)
	}
}

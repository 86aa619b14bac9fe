package bench_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"coord/bench"
)

// Nearest rank: the smallest value with at least p% of the values at or
// below it.
func TestPercentile(t *testing.T) {
	var sorted []time.Duration
	for i := 1; i <= 10; i++ {
		sorted = append(sorted, time.Duration(i))
	}
	for _, c := range []struct {
		p    int
		want time.Duration
	}{{1, 1}, {10, 1}, {11, 2}, {50, 5}, {51, 6}, {99, 10}, {100, 10}} {
		if got := bench.Percentile(sorted, c.p); got != c.want {
			t.Errorf("p%d of 1..10: %d, want %d", c.p, got, c.want)
		}
	}
	if got := bench.Percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("p99 of one value: %d", got)
	}
}

func TestFormatMS(t *testing.T) {
	for ms, want := range map[float64]string{0.5: "0.50ms", 999.994: "999.99ms", 1000: "1.00s", 9530: "9.53s"} {
		if got := bench.FormatMS(ms); got != want {
			t.Errorf("%v ms: %q, want %q", ms, got, want)
		}
	}
}

func TestMachineNamesTheGoVersion(t *testing.T) {
	if m := bench.Machine(); !strings.Contains(m, "CPUs") || !strings.Contains(m, "go1.") {
		t.Fatalf("machine %q", m)
	}
}

// ClosedLoop counts every call: successes as sorted latencies, failures
// apart, each call bounded by its timeout.
func TestClosedLoopCountsCalls(t *testing.T) {
	var calls [2]atomic.Int64
	lat, errs, secs := bench.ClosedLoop(context.Background(), 2, 50*time.Millisecond, time.Second, func(ctx context.Context, w int) error {
		calls[w].Add(1)
		if _, ok := ctx.Deadline(); !ok {
			t.Error("a call without a deadline")
		}
		if w == 1 {
			return errors.New("worker 1 fails")
		}
		return nil
	})
	if int64(len(lat)) != calls[0].Load() || int64(errs) != calls[1].Load() || len(lat) == 0 || errs == 0 {
		t.Fatalf("%d latencies, %d errors; worker 0 called %d times, worker 1 %d", len(lat), errs, calls[0].Load(), calls[1].Load())
	}
	if !slices.IsSorted(lat) || secs < 0.05 {
		t.Fatalf("latencies sorted: %v; ran %v s, want at least the 0.05 s asked", slices.IsSorted(lat), secs)
	}
}

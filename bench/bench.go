package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// ClosedLoop runs n workers for d, each calling op back to back (a closed
// loop: a worker's next call starts when its last returns), every call
// bounded by opTimeout. It returns the latencies of the calls that
// succeeded, sorted, how many failed, and the seconds the workers ran.
func ClosedLoop(ctx context.Context, n int, d, opTimeout time.Duration, op func(ctx context.Context, worker int) error) (lat []time.Duration, errs int, secs float64) {
	var mu sync.Mutex
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			var mine []time.Duration
			bad := 0
			for time.Now().Before(end) && ctx.Err() == nil {
				octx, cancel := context.WithTimeout(ctx, opTimeout)
				t0 := time.Now()
				err := op(octx, w)
				cancel()
				if err != nil {
					bad++
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			errs += bad
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(lat)
	return lat, errs, time.Since(start).Seconds()
}

// Percentile returns the nearest-rank percentile p (1 to 100) of sorted,
// which must not be empty.
func Percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(rank, 1)-1]
}

// Milliseconds returns d in milliseconds, to the microsecond.
func Milliseconds(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// FormatMS formats a figure in milliseconds: "3.21ms", or "1.50s" from a
// second up.
func FormatMS(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%.2fs", ms/1000)
	}
	return fmt.Sprintf("%.2fms", ms)
}

// Machine describes the machine for the record: CPUs and their model, OS
// and architecture, kernel release and Go version.
func Machine() string {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	model := ""
	if cpuinfo, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(cpuinfo), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s/%s, Linux %s, %s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH, strings.TrimSpace(string(kernel)), runtime.Version())
}

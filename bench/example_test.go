package bench_test

import (
	"fmt"
	"slices"
	"time"

	"coord/bench"
)

func ExamplePercentile() {
	gaps := []time.Duration{40 * time.Millisecond, 12 * time.Millisecond, 9 * time.Millisecond, 15 * time.Millisecond}
	slices.Sort(gaps)
	fmt.Println(bench.FormatMS(bench.Milliseconds(bench.Percentile(gaps, 50))), bench.FormatMS(bench.Milliseconds(bench.Percentile(gaps, 99))))
	// Output: 12.00ms 40.00ms
}

package failover_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"coord/bench/failover"
)

func ExampleSummarize() {
	ms := time.Millisecond
	s := failover.Summarize("coord", "killed", []time.Duration{4 * ms, 2 * ms, 9 * ms}, nil, 0)
	fmt.Println(s.Trials, s.MinMS, s.MedianMS, s.P99MS)
	// Output: 3 2 4 9
}

// Run needs the coord binary, whose elect and articles commands the
// contenders run; this example is compiled, not run.
func ExampleRun() {
	cfg := failover.DefaultConfig()
	cfg.Binary, cfg.Dir = "/usr/local/bin/coord", os.TempDir()
	cfg.Trials, cfg.BaselineTrials = 20, 0
	results, err := failover.Run(context.Background(), cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	failover.WriteText(os.Stdout, cfg, results)
}

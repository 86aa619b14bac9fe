package sim_test

import (
	"fmt"
	"time"

	"coord/sim"
)

// Example runs one seed with every fault and prints whether the checkers
// passed. The same seed always gives the same run.
func Example() {
	cfg := sim.DefaultConfig()
	cfg.Seed = 7
	cfg.Nodes = 3
	cfg.Chaos = time.Second
	res := sim.Run(cfg)
	fmt.Println("violation:", res.Err)
	fmt.Println("replay:", cfg.ReplayCommand())
	// Output:
	// violation: <nil>
	// replay: go run ./cmd/coord sim --seed 7 --nodes 3 --faults all --chaos 1s
}

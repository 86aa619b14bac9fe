package watches_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"coord/bench/watches"
)

// Run needs the coord binary, whose server command the nodes run; this
// example is compiled, not run.
func ExampleRun() {
	cfg := watches.Config{Watches: 1000, Nodes: 1, Dir: os.TempDir(), Binary: "/usr/local/bin/coord",
		MaxWatches: 1000, After: []time.Duration{time.Second}}
	res, err := watches.Run(context.Background(), cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	res.WriteText(os.Stdout, cfg)
}

package raftnode_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"coord/bench/raftnode"
)

// Measure three nodes on the disk of a temporary directory at 1 and 16
// proposers (figures vary by machine, so the example prints only what ran).
func ExampleRun() {
	dir, err := os.MkdirTemp("", "raftnode-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	rows, err := raftnode.Run(context.Background(), raftnode.Config{Nodes: 3, Dir: dir, Concurrency: []int{1, 16},
		Duration: 100 * time.Millisecond, ValueBytes: 100})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rows {
		fmt.Printf("%d proposers: %d errors\n", r.Concurrency, r.Errors)
	}
	// Output:
	// 1 proposers: 0 errors
	// 16 proposers: 0 errors
}

package raftnode_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"coord/bench/raftnode"
)

// Run measures real proposals: every one counted was applied on the
// leader of a cluster on the real disk. (No figure is checked: timing
// belongs in the benchmark's output.)
func TestRunMeasuresAppliedProposals(t *testing.T) {
	rows, err := raftnode.Run(context.Background(), raftnode.Config{Nodes: 3, Dir: t.TempDir(), Concurrency: []int{1, 4},
		Duration: 200 * time.Millisecond, ValueBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Concurrency != 1 || rows[1].Concurrency != 4 {
		t.Fatalf("rows %+v, want one per concurrency", rows)
	}
	for _, r := range rows {
		if r.Ops == 0 || r.Errors != 0 || r.P50 <= 0 || r.P99 < r.P50 {
			t.Errorf("row %+v: want proposals applied without errors, p50 <= p99", r)
		}
	}
}

func TestConfigIsValidated(t *testing.T) {
	for _, cfg := range []raftnode.Config{
		{Nodes: 0, Dir: "x", Duration: time.Second},
		{Nodes: 3, Dir: "", Duration: time.Second},
		{Nodes: 3, Dir: "x", Duration: 0},
		{Nodes: 3, Dir: "x", Duration: time.Second, Concurrency: []int{0}},
		{Nodes: 3, Dir: "x", Duration: time.Second, ValueBytes: -1},
	} {
		if _, err := raftnode.Run(context.Background(), cfg); !errors.Is(err, raftnode.ErrInvalid) {
			t.Errorf("Run(%+v) = %v, want ErrInvalid", cfg, err)
		}
	}
}

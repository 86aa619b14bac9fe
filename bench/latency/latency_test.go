package latency_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coord/bench/latency"
	"coord/lease"
	_ "coord/lease/sqlite"
)

// A real SQLite store: every operation, its ping included, is timed.
func TestMeasureSQLite(t *testing.T) {
	store := "sqlite://" + filepath.Join(t.TempDir(), "leases.db")
	b, err := lease.Open(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	stats, err := latency.Measure(context.Background(), b, store, 5, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != len(latency.Ops) {
		t.Fatalf("%d rows, want one per op %v: %+v", len(stats), latency.Ops, stats)
	}
	for i, s := range stats {
		if s.Op != latency.Ops[i] || s.N != 5 || s.Errors != 0 || s.MedianUS <= 0 || s.P99US < s.MedianUS || s.Store != store {
			t.Errorf("row %d: %+v", i, s)
		}
	}
}

func TestMeasureRefusesBadArguments(t *testing.T) {
	for _, c := range []struct {
		iterations int
		ttl        time.Duration
	}{{0, time.Second}, {5, 0}} {
		if _, err := latency.Measure(context.Background(), nil, "x://", c.iterations, c.ttl); !errors.Is(err, latency.ErrInvalid) {
			t.Errorf("%d iterations, ttl %v: %v, want ErrInvalid", c.iterations, c.ttl, err)
		}
	}
}

func TestWriteTextRatiosToPing(t *testing.T) {
	results := []latency.Stats{
		{Store: "redis://h:6379/0", Op: "acquire", N: 10, MedianUS: 300, P99US: 900},
		{Store: "redis://h:6379/0", Op: "ping", N: 10, MedianUS: 100, P99US: 200},
		{Store: "file:///tmp/l", Op: "acquire", N: 10, MedianUS: 1500, P99US: 2500, Errors: 2},
	}
	var b bytes.Buffer
	latency.WriteText(&b, 10, time.Second, results)
	for _, want := range []string{"redis    acquire       300µs      900µs       3.0x", "file     acquire      1.50ms     2.50ms          -", "(2 failed)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

func TestRedactHidesThePassword(t *testing.T) {
	if got := latency.Redact("postgres://u:secret@h:5432/db"); strings.Contains(got, "secret") || !strings.Contains(got, "u:") {
		t.Fatalf("redacted %q", got)
	}
}

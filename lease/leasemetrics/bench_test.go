//go:build linux

package leasemetrics_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"coord/lease"
	"coord/lease/file"
	"coord/lease/leasemetrics"
)

// BenchmarkRenew is what the metrics add to a renewal: Renew on a lock file
// (the cheapest store, where a fixed cost shows most), plain and timed by
// Metrics.Backend, side by side.
//
//	go test ./lease/leasemetrics -run '^$' -bench Renew -count 5
func BenchmarkRenew(b *testing.B) {
	for _, c := range []struct {
		name string
		wrap func(lease.Backend) lease.Backend
	}{
		{"plain", func(b lease.Backend) lease.Backend { return b }},
		{"metrics", func(b lease.Backend) lease.Backend { return leasemetrics.New("l.lock", "a", "file").Backend(b) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			raw, err := file.Open(filepath.Join(b.TempDir(), "l.lock"), file.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer raw.Close()
			be := c.wrap(raw)
			ctx := context.Background()
			rec, err := be.Acquire(ctx, "l.lock", "a", time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := be.Renew(ctx, "l.lock", "a", rec.Token, time.Minute); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// instant is a Backend whose Renew answers at once, to isolate the fixed
// cost the metrics add (timing, a histogram observation, a gauge).
type instant struct{ lease.Backend }

func (instant) Renew(_ context.Context, name, holder string, token uint64, ttl time.Duration) (lease.Record, error) {
	return lease.Record{Name: name, Holder: holder, Token: token}, nil
}

// BenchmarkRenewFixedCost is the metrics' own cost per renewal, on a
// Backend that costs nothing.
//
//	go test ./lease/leasemetrics -run '^$' -bench RenewFixedCost -count 5
func BenchmarkRenewFixedCost(b *testing.B) {
	for _, c := range []struct {
		name string
		be   lease.Backend
	}{
		{"plain", instant{}},
		{"metrics", leasemetrics.New("l", "a", "x").Backend(instant{})},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				if _, err := c.be.Renew(ctx, "l", "a", 1, time.Minute); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

//go:build linux

package file_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"coord/lease/file"
)

// BenchmarkAcquireRelease measures one acquisition and one release of a
// free lease in one process: the store's own cost, without contention.
//
//	go test -run '^$' -bench . ./lease/file
func BenchmarkAcquireRelease(b *testing.B) {
	be, err := file.Open(filepath.Join(b.TempDir(), "leader.lock"), file.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	ctx := context.Background()
	for b.Loop() {
		r, err := be.Acquire(ctx, "leader.lock", "h", 9*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := be.Release(ctx, "leader.lock", "h", r.Token); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenew measures one renewal of a held lease.
func BenchmarkRenew(b *testing.B) {
	be, err := file.Open(filepath.Join(b.TempDir(), "leader.lock"), file.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	ctx := context.Background()
	r, err := be.Acquire(ctx, "leader.lock", "h", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := be.Renew(ctx, "leader.lock", "h", r.Token, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTakeover measures one acquisition of a lease whose holder has
// just died (its Backend closed): the store's share of a failover gap,
// after the watcher's wake-up.
func BenchmarkTakeover(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "leader.lock")
	be, err := file.Open(path, file.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		holder, err := file.Open(path, file.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := holder.Acquire(ctx, "leader.lock", "dead", time.Minute); err != nil {
			b.Fatal(err)
		}
		holder.Close()
		b.StartTimer()
		r, err := be.Acquire(ctx, "leader.lock", "h", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := be.Release(ctx, "leader.lock", "h", r.Token); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

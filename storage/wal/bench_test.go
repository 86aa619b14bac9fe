package wal_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"coord/raft"
	"coord/storage/vfs"
	"coord/storage/wal"
)

// BenchmarkAppendSync measures Append of a batch followed by Sync (fsync) on
// the real disk (the test's temporary directory), by batch size, with
// segments preallocated (the default: writes into allocated space, synced
// with fdatasync) and without (each write grows the file): one operation is
// one durable batch. Besides ns/op it reports the median and 99th
// percentile latency of a batch and the entries made durable per second.
//
//	go test -run '^$' -bench AppendSync -count 5 ./storage/wal
func BenchmarkAppendSync(b *testing.B) {
	const entryBytes = 128
	for _, batch := range []int{1, 8, 64, 256} {
		for _, prealloc := range []int64{-1, 0} {
			name := fmt.Sprintf("batch=%d/prealloc=%v", batch, prealloc == 0)
			b.Run(name, func(b *testing.B) { benchmarkAppendSync(b, batch, entryBytes, prealloc) })
		}
	}
}

func benchmarkAppendSync(b *testing.B, batch, entryBytes int, prealloc int64) {
	{
		{
			w, _, err := wal.Open(vfs.OS, b.TempDir(), wal.Options{Logger: quiet, PreallocateBytes: prealloc})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			ents := make([]raft.Entry, batch)
			data := make([]byte, entryBytes)
			b.SetBytes(int64(batch * entryBytes))
			latencies := make([]time.Duration, 0, b.N)
			next := uint64(1)
			b.ResetTimer()
			for range b.N {
				for i := range ents {
					ents[i] = raft.Entry{Term: 1, Index: next, Data: data}
					next++
				}
				start := time.Now()
				if err := w.Append(raft.HardState{Term: 1, Commit: next - 1}, ents); err != nil {
					b.Fatal(err)
				}
				if err := w.Sync(); err != nil {
					b.Fatal(err)
				}
				latencies = append(latencies, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(latencies)
			b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "entries/s")
		}
	}
}

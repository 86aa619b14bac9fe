package tcp

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"coord/raft"
	"coord/storage/snapshot"
	"coord/storage/vfs"
)

// BenchmarkSnapshotStreamToDisk sends a snapshot file of
// COORD_BENCH_SNAPSHOT_MB megabytes (default 64) over the TCP transport on
// loopback, from the leader's file (snapshot.Source) to the follower's
// data directory (raftstore's spool), and adopts it there: the whole path
// of a snapshot to a follower but the state machine's restore. Past 1024
// it is over the old design's bound (1 GiB, held in memory at both ends).
// It reports the throughput and the process's peak RSS (VmHWM, both ends
// together), which stays far below the snapshot's size.
//
//	COORD_BENCH_SNAPSHOT_MB=1500 go test ./transport/tcp -run '^$' -bench SnapshotStreamToDisk -benchtime 1x
func BenchmarkSnapshotStreamToDisk(b *testing.B) {
	sizeMB := 64
	if s := os.Getenv("COORD_BENCH_SNAPSHOT_MB"); s != "" {
		var err error
		if sizeMB, err = strconv.Atoi(s); err != nil || sizeMB <= 0 {
			b.Fatalf("COORD_BENCH_SNAPSHOT_MB=%q: want a positive number", s)
		}
	}
	size := int64(sizeMB) * 1_000_000
	dir := b.TempDir()
	meta := raft.SnapshotMetadata{Index: 100, Term: 4, ConfState: raft.ConfState{Voters: []uint64{1, 2}}}
	w, err := snapshot.Create(vfs.OS, dir, meta)
	if err != nil {
		b.Fatal(err)
	}
	r, _ := patternSource{size: size}.Open()
	if _, err := io.Copy(w, r); err != nil {
		b.Fatal(err)
	}
	sum, err := w.Commit()
	if err != nil {
		b.Fatal(err)
	}
	src := snapshot.NewSource(vfs.OS, filepath.Join(dir, snapshot.FileName(100, 4)), size, sum)
	b.SetBytes(size)
	b.ResetTimer()
	for i := range b.N {
		ds := newDiskSpool(b, filepath.Join(dir, fmt.Sprintf("follower-%d", i)))
		reports := make(chan bool, 1)
		a, f := startPair(b, func(c *Config) {
			c.SnapshotDone = func(_ uint64, failed bool) { reports <- failed }
			c.WriteTimeout = 30 * time.Second // a loaded machine's disk
			if c.ID == 2 {
				c.SpoolSnapshot = ds.spool
			}
		})
		waitConnected(b, a, 2)
		a.Send([]raft.Message{{Type: raft.MsgSnapshotRequest, From: 1, To: 2, Term: 4,
			Snapshot: raft.Snapshot{Metadata: meta, Source: src}}})
		got := f.in.waitFor(b, 1)[0]
		if err := ds.disk.ApplySnapshot(got.Snapshot); err != nil {
			b.Fatal(err)
		}
		if failed := <-reports; failed {
			b.Fatal("the send failed")
		}
		a.Close()
		f.Close()
	}
	b.StopTimer()
	b.ReportMetric(float64(peakRSS(b))/1e6, "peak-rss-MB")
}

// peakRSS returns the process's peak resident set (VmHWM), in bytes.
func peakRSS(tb testing.TB) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Skip("no /proc/self/status:", err)
	}
	var kb int64
	for _, line := range strings.Split(string(data), "\n") {
		if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &kb); err == nil {
			return kb * 1024
		}
	}
	tb.Skip("no VmHWM in /proc/self/status")
	return 0
}

//go:build linux

package tcp

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"coord/raft"
)

// BenchmarkWriteBesideFsync is one single-client write's path through the
// transport and the disk, without the Raft core: the leader sends an
// append and then fsyncs its own copy (as node.Handler does: the append
// leaves before the leader's write), the follower's reader fsyncs the
// entry and acknowledges, and the write is done when both the leader's
// fsync and the acknowledgement are in. It reports the median of that
// (write-µs), the median of a lone fsync of the same file measured in the
// same loop (fsync-µs), and their ratio, with direct writes off (the
// append waits for the writer goroutine, which runs only once the leader
// blocks in its fsync and the scheduler gets to it) and on.
//
//	go test ./transport/tcp -run '^$' -bench WriteBesideFsync -benchtime 400x -count 3
func BenchmarkWriteBesideFsync(b *testing.B) {
	for _, direct := range []bool{false, true} {
		name := "direct=off"
		if direct {
			name = "direct=on"
		}
		b.Run(name, func(b *testing.B) { benchmarkWriteBesideFsync(b, direct) })
	}
}

func benchmarkWriteBesideFsync(b *testing.B, direct bool) {
	dir := b.TempDir()
	leaderLog, followerLog := syncFile(b, filepath.Join(dir, "leader")), syncFile(b, filepath.Join(dir, "follower"))
	acks := make(chan time.Time, 1)
	var follower *Transport
	l1, l2 := listen(b), listen(b)
	peers := map[uint64]string{1: l1.Addr().String(), 2: l2.Addr().String()}
	tweak := func(id uint64) func(*Config) {
		return func(c *Config) {
			if !direct {
				c.DirectWriteMaxBytes = 0
			}
			if id == 1 {
				c.Deliver = func(raft.Message) { acks <- time.Now() }
				return
			}
			c.Deliver = func(m raft.Message) {
				appendSync(b, followerLog, m.LogIndex)
				follower.Send([]raft.Message{{Type: raft.MsgAppendResponse, From: 2, To: 1, Term: m.Term, LogIndex: m.LogIndex}})
			}
		}
	}
	leader := start(b, 1, l1, peers, tweak(1))
	follower = start(b, 2, l2, peers, tweak(2)).Transport
	waitConnected(b, leader, 2)
	entry := []raft.Entry{{Term: 1, Data: make([]byte, 300)}}
	writes := make([]time.Duration, 0, b.N)
	fsyncs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		index := uint64(2*i + 1)
		entry[0].Index = index
		start := time.Now()
		leader.Send([]raft.Message{{Type: raft.MsgAppendRequest, From: 1, To: 2, Term: 1, LogIndex: index, Entries: entry}})
		appendSync(b, leaderLog, index)
		synced := time.Now()
		var acked time.Time
		select {
		case acked = <-acks:
		case <-time.After(waitMax):
			b.Fatalf("write %d: no acknowledgement", i)
		}
		done := synced
		if acked.After(done) {
			done = acked
		}
		writes = append(writes, done.Sub(start))
		// A lone fsync of the same file, for the unit.
		start = time.Now()
		appendSync(b, leaderLog, index+1)
		fsyncs = append(fsyncs, time.Since(start))
	}
	b.StopTimer()
	write, fsync := median(writes), median(fsyncs)
	b.ReportMetric(float64(write.Microseconds()), "write-µs")
	b.ReportMetric(float64(fsync.Microseconds()), "fsync-µs")
	b.ReportMetric(float64(write)/float64(fsync), "write/fsync")
}

// syncFile creates a file of 4 MiB of zeros, synced, so that the writes
// the benchmark syncs change no size (as the WAL's preallocated segments).
func syncFile(tb testing.TB, path string) *os.File {
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	if _, err := f.Write(make([]byte, 4<<20)); err != nil {
		tb.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		tb.Fatal(err)
	}
	return f
}

// appendSync writes 512 bytes at a place given by index (wrapping in the
// file) and fdatasyncs: a WAL append.
func appendSync(tb testing.TB, f *os.File, index uint64) {
	if _, err := f.WriteAt(make([]byte, 512), int64(index%8000)*512); err != nil {
		tb.Error(err)
		return
	}
	if err := syscall.Fdatasync(int(f.Fd())); err != nil {
		tb.Error(err)
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

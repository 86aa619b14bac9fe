package server

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// cpuTime returns the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRestoreFromFile is how long a follower's loop waits while the
// state machine restores a snapshot received from the leader (node's
// installSnapshot runs on the loop): the snapshot of keys keys of 256
// bytes, written to a file as a received one is, decoded from the file
// through stateMachine.RestoreFrom.
//
//	go test ./server -run '^$' -bench RestoreFromFile -benchtime 3x
func BenchmarkRestoreFromFile(b *testing.B) {
	for _, keys := range []int{100_000, 500_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			m := NewMachine(DefaultLimits())
			value := make([]byte, 256)
			for i := range keys {
				m.ApplyCommand(uint64(i+1), Command{Op: OpPut, Key: fmt.Sprintf("bench/%09d", i), Value: value})
			}
			path := filepath.Join(b.TempDir(), "snap")
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			size, err := m.SnapshotView().WriteTo(f)
			if err != nil || f.Close() != nil {
				b.Fatal(err)
			}
			m = nil
			b.SetBytes(size)
			b.ResetTimer()
			cpu := cpuTime()
			for range b.N {
				sm := &stateMachine{machine: NewMachine(DefaultLimits()), lessor: newLessor(0), changed: make(chan struct{})}
				f, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				if err := sm.RestoreFrom(f, size); err != nil {
					b.Fatal(err)
				}
				f.Close()
				if n, _, _ := sm.machine.Len(); n != keys {
					b.Fatalf("restored %d keys, want %d", n, keys)
				}
			}
			// On a shared machine the wall time counts the waits for a
			// core; the process's CPU time does not (it includes the
			// garbage collector's, on any thread).
			b.ReportMetric((cpuTime()-cpu).Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}

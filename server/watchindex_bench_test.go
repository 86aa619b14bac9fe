package server

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkApplyBeside1000Watchers applies writes to other keys while
// 1,000 watches wait on one key: "by-key" waits as the API does now
// (ChangedOf), "any-change" as it did before (Changed, woken by every
// apply). It reports the watches woken per write and the process's CPU
// time per write (the writes' and the woken watches' together). Each
// write waits 100 µs after it, as writes spread over time do, so that the
// watches can wait again between them.
//
//	go test ./server -run '^$' -bench ApplyBeside1000Watchers
func BenchmarkApplyBeside1000Watchers(b *testing.B) {
	for _, mode := range []string{"by-key", "any-change"} {
		b.Run(mode, func(b *testing.B) {
			s := &stateMachine{machine: NewMachine(DefaultLimits()), lessor: newLessor(time.Second), changed: make(chan struct{})}
			wait := func() <-chan struct{} {
				s.mu.Lock()
				defer s.mu.Unlock()
				if mode == "by-key" {
					return s.watches.wait(Watched{Name: "watched"})
				}
				s.changedTaken = true
				return s.changed
			}
			var wakeups atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 1000 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-wait():
							wakeups.Add(1)
						case <-stop:
							return
						}
					}
				}()
			}
			cmds := make([][]byte, 1000)
			for i := range cmds {
				cmds[i] = Command{Op: OpPut, Key: fmt.Sprint("other/", i), Value: make([]byte, 256)}.Marshal()
			}
			cpu0 := processCPU()
			b.ResetTimer()
			for i := range b.N {
				s.Apply(uint64(i+1), cmds[i%len(cmds)])
				for start := time.Now(); time.Since(start) < 100*time.Microsecond; {
					runtime.Gosched()
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/write")
			close(stop)
			wg.Wait()
			b.ReportMetric(float64(wakeups.Load())/float64(b.N), "wakeups/write")
		})
	}
}

package threads

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The counters of the race, mutex and granularity experiments. Each runs
// goroutines workers that add increments each and returns the final total;
// the right answer is goroutines × increments.

// racyCount is the articles' broken counter: counter++ on a shared int with no
// synchronisation, so concurrent read-modify-write sequences overwrite each
// other.
func racyCount(goroutines, increments int) int {
	var counter int
	var wg sync.WaitGroup
	wg.Add(goroutines)
	for range goroutines {
		go racyWorker(&counter, increments, &wg)
	}
	wg.Wait()
	return loadNoRace(&counter)
}

// racyCountParallel is racyCount with goroutines that spin at a start line
// until every one of them is running, so that they count at the same instant
// wherever the operating system gives them cores at once. Each is locked to
// its thread, which measures the CPU time it spent counting. It returns the
// total and the cores' worth of CPU the counting got: the goroutines' CPU
// seconds between them per second of wall time, goroutines when the machine
// ran every one of them throughout, less when other work held the cores.
func racyCountParallel(goroutines, increments int) (total int, cores float64) {
	var counter int
	var wg sync.WaitGroup
	var arrived atomic.Int64
	var cpuNanos atomic.Int64
	var released time.Time
	wg.Add(goroutines)
	for i := range goroutines {
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			// A spin, not a channel: a goroutine woken from a channel may wait
			// for a thread, and then the others have finished before it starts.
			arrived.Add(1)
			for arrived.Load() < int64(goroutines) {
			}
			if i == 0 {
				released = time.Now() // read only after wg.Wait
			}
			before := threadCPU()
			racyWorker(&counter, increments, nil)
			cpuNanos.Add(int64(threadCPU() - before))
		}()
	}
	wg.Wait()
	if wall := time.Since(released); wall > 0 {
		cores = float64(cpuNanos.Load()) / float64(wall)
	}
	return loadNoRace(&counter), cores
}

// racyWorker does the unsynchronised increments. It is exempt from the race
// detector on purpose: the lab's own tests run under -race, and this race is
// the experiment, not a bug. The race detector's verdict on the same code
// comes from the separate program in testdata/counter, built with -race. wg,
// when not nil, is told when the worker is done.
//
//go:norace
func racyWorker(counter *int, increments int, wg *sync.WaitGroup) {
	if wg != nil {
		defer wg.Done()
	}
	for range increments {
		// A load, an add and a store, not atomic: three instructions on
		// arm64, one (INCQ) on amd64 that another core can still cut into.
		*counter++
	}
}

// loadNoRace reads the counter after wg.Wait. The WaitGroup orders it after
// every increment; the annotation only keeps the detector from flagging the
// increments it was told to ignore.
//
//go:norace
func loadNoRace(counter *int) int { return *counter }

// safeCounter is the articles' fix: the value and the mutex that guards it in
// one struct, which writes down what the lock protects.
type safeCounter struct {
	mu    sync.Mutex
	value int
}

func (c *safeCounter) inc() {
	c.mu.Lock()
	c.value++
	c.mu.Unlock()
}

// mutexCount counts with a safeCounter, locking per increment.
func mutexCount(goroutines, increments int) int {
	var c safeCounter
	var wg sync.WaitGroup
	wg.Add(goroutines)
	for range goroutines {
		go func() {
			defer wg.Done()
			for range increments {
				c.inc()
			}
		}()
	}
	wg.Wait()
	return c.value
}

// coarseCount takes the lock once around each worker's whole loop.
func coarseCount(goroutines, increments int) int {
	var c safeCounter
	var wg sync.WaitGroup
	wg.Add(goroutines)
	for range goroutines {
		go func() {
			defer wg.Done()
			c.mu.Lock()
			for range increments {
				c.value++
			}
			c.mu.Unlock()
		}()
	}
	wg.Wait()
	return c.value
}

// atomicCount asks the CPU for the atomicity instead: one atomic add per
// increment.
func atomicCount(goroutines, increments int) int {
	var counter atomic.Int64
	var wg sync.WaitGroup
	wg.Add(goroutines)
	for range goroutines {
		go func() {
			defer wg.Done()
			for range increments {
				counter.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(counter.Load())
}

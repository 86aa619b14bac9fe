package threads

import (
	"sync"
	"sync/atomic"
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

// racyCountTogether is racyCount with a start line: every worker waits until
// all have been started, so that they run at the same time wherever there
// are cores for them.
func racyCountTogether(goroutines, increments int) int {
	var counter int
	var wg sync.WaitGroup
	start := make(chan struct{})
	wg.Add(goroutines)
	for range goroutines {
		go func() {
			<-start
			racyWorker(&counter, increments, &wg)
		}()
	}
	close(start)
	wg.Wait()
	return loadNoRace(&counter)
}

// racyWorker does the unsynchronised increments. It is exempt from the race
// detector on purpose: the lab's own tests run under -race, and this race is
// the experiment, not a bug. The race detector's verdict on the same code
// comes from the separate program in testdata/counter, built with -race.
//
//go:norace
func racyWorker(counter *int, increments int, wg *sync.WaitGroup) {
	defer wg.Done()
	for range increments {
		*counter++ // load, add, store: three steps another goroutine can interleave
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

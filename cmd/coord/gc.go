package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// The garbage collector's target that 'coord server' runs with unless the
// environment sets GOGC: Go's default (100: the heap may grow by all of its
// live size between collections) while the live heap is small,
// serverGCPercentMin once it is large, and between the two a constant
// headroom of serverGCHeadroomBytes.
//
// A node's heap is mostly its state machine (keys, values, leases), which
// lives as long as the process, while a write leaves a few kilobytes of
// garbage. Its resident memory follows the collector's goal (live heap
// plus headroom, and about a tenth more that the runtime keeps before it
// returns freed pages), so at 500,000 keys (about 200 MB live) the
// headroom is a third of what the node holds, and a smaller one costs
// little CPU: each collection marks the live heap it would have marked
// anyway (docs/BENCHMARKS.md, "The garbage collector's target" and
// "Memory at 500k keys"; Prometheus made the same kind of change in
// 2.53). At 10,000 keys (about 20 MB live) the same percentage would
// multiply the collections for a few MB of memory, a tenth of the
// leader's CPU under the watch load ("The leader's CPU under the watch
// load"). A fixed percentage cannot serve both ends; a target that follows
// the live heap, as the GC tuners of TiDB and Uber do, can: 64 MiB of
// room from 64 MiB live until that is a quarter of the live heap (256
// MiB).
const (
	serverGCPercentMax    = 100
	serverGCPercentMin    = 25
	serverGCHeadroomBytes = 64 << 20
)

// serverGCPercentFor returns the target for a live heap of liveBytes:
// serverGCPercentMax up to serverGCHeadroomBytes of live heap,
// serverGCPercentMin from four times that, and between the two the percentage
// that leaves serverGCHeadroomBytes of room (rounded down to a whole
// percent).
func serverGCPercentFor(liveBytes uint64) int {
	if liveBytes <= serverGCHeadroomBytes {
		return serverGCPercentMax
	}
	return max(int(serverGCHeadroomBytes*100/liveBytes), serverGCPercentMin)
}

// gcTuner sets the garbage collector's percentage from the live heap after
// every collection (serverGCPercentFor).
//
// gcTuner is safe for concurrent use: the runtime's cleanup goroutine runs
// tune, and stop may be called from any goroutine.
type gcTuner struct {
	mu      sync.Mutex
	stopped bool
	percent int // in force, as last set
	tunes   int // collections seen, for tests
	tuned   chan struct{}
	sample  []metrics.Sample
}

// serverGCOnce starts the tuner once a process, however many servers a
// test runs in it.
var serverGCOnce sync.Once

// gcSentinel is the object whose cleanup tells the tuner that a collection
// ran: it is unreachable from the moment it is armed. It holds a pointer so
// that it is not a tiny allocation, which could share a block with a live
// object and never be freed.
type gcSentinel struct{ _ *byte }

// startServerGC starts the tuner unless the environment sets GOGC, which
// then stands as the operator's choice; it returns the tuner (nil with
// GOGC set) and the percentage in force.
func startServerGC() (*gcTuner, int) {
	if v, ok := os.LookupEnv("GOGC"); ok && v != "" {
		p := debug.SetGCPercent(100) // read it back: the runtime parsed GOGC
		debug.SetGCPercent(p)
		return nil, p
	}
	t := &gcTuner{tuned: make(chan struct{}, 1),
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.mu.Lock()
	t.set()
	p := t.percent
	t.mu.Unlock()
	t.arm()
	return t, p
}

// arm allocates a sentinel that the next collection finds unreachable;
// its cleanup tunes and arms the next.
func (t *gcTuner) arm() {
	runtime.AddCleanup(&gcSentinel{}, func(t *gcTuner) { t.tune() }, t)
}

// tune runs after a collection: it sets the percentage for the live heap
// that collection marked, and arms the next sentinel.
func (t *gcTuner) tune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.set()
	t.tunes++
	select {
	case t.tuned <- struct{}{}:
	default:
	}
	t.arm()
}

// set reads the live heap and sets the percentage if it changed (t.mu held).
func (t *gcTuner) set() {
	metrics.Read(t.sample)
	var live uint64
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	if p := serverGCPercentFor(live); p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
}

// Percent returns the percentage the tuner set last.
func (t *gcTuner) Percent() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.percent
}

// stop ends the tuning; the percentage set last stays in force.
func (t *gcTuner) stop() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
}

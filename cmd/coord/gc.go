package main

import (
	"os"
	"runtime/debug"
)

// serverGCPercent is the garbage collector's target that 'coord server'
// runs with unless the environment sets GOGC: the heap may grow by half
// its live size between collections instead of Go's default of all of it.
//
// A node's heap is mostly its state machine (keys, values, leases), which
// lives as long as the process, while a write leaves a few kilobytes of
// garbage. Collections then come twice as often but each marks what it
// would have anyway, so the CPU they cost grows little, and the peak
// resident memory falls by about a fifth: docs/BENCHMARKS.md, "The
// garbage collector's target". Prometheus made the same change (GOGC 100
// to 50 in 2.53) for the same reason.
const serverGCPercent = 50

// setServerGCPercent sets serverGCPercent unless GOGC is set, which then
// stands as the operator's choice; it reports the percentage in force.
func setServerGCPercent() int {
	if v, ok := os.LookupEnv("GOGC"); ok && v != "" {
		p := debug.SetGCPercent(100) // read it back: the runtime parsed GOGC
		debug.SetGCPercent(p)
		return p
	}
	debug.SetGCPercent(serverGCPercent)
	return serverGCPercent
}

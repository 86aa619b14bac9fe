// Package fence provides a resource guarded by fencing tokens: it remembers
// the highest token it has accepted and rejects writes with lower ones.
//
// A lease tells a holder when it may act, but cannot stop a holder that was
// paused (a GC pause, SIGSTOP, a slow disk) from acting late, after its lease
// passed to someone else. A resource that checks the token can. The lease
// conformance suite (lease/leasetest) and the lab's paused-leader experiment
// record their writes in a Resource and check its history.
package fence

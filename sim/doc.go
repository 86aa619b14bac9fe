// Package sim is a deterministic simulator of a Raft cluster built on the
// raft core, with invariant checkers that run after every step.
//
// Each simulated node runs the production Ready handler, node.Handler (as
// TigerBeetle's simulator drives the production replica): the simulator
// gives it a clock, a network, a state machine and a storage that can
// crash and fill up, and watches it through its hooks. The files follow
// the parts: sim.go (the run, nodes booting and crashing), handler.go (the
// node's handler and its storage), network.go, faults.go, workload.go
// (client writes and reads), checker.go (the safety checks), checks.go
// (phases, liveness, the final checks), snapshot.go (snapshots written
// in the background, at a later event than the view they write) and
// limits.go (the handlers' byte limits each seed chooses).
//
// One seed drives everything: the network (loss, delay, reordering,
// duplication, symmetric and one-way partitions), the nodes' clocks (each
// node ticks with its own phase), crashes and restarts (only what the Ready
// contract persisted survives), membership changes (learners added, caught
// up and promoted; voters removed, leaders included) and a client workload
// of writes and ReadIndex reads, on leaders and on followers (which ask the
// leader for the read index), and in some seeds on candidates (which hold
// a write until the election ends). It chooses small flow-control and byte
// limits too (snapshots every few bytes, a bound on a candidate's held
// writes), so that what they trigger runs under faults. Time is simulated: a run of minutes takes
// milliseconds, and the same seed replays the same run exactly.
//
// The checkers (see Violation) are Raft's safety properties: at most one
// leader per term, at most one vote per node per term, log matching, leader
// completeness, state machine safety, no acknowledged write lost,
// linearizable ReadIndex reads (on a leader or a follower, a read is served
// from a state applied through a read index at or above every write
// acknowledged before it began), every snapshot a node takes restoring
// exactly the state applied at its index; and liveness: once the faults stop, a
// leader is elected and commits a new write within a bounded time.
//
// The simulated network never blocks a sender: a message to a crashed or
// overloaded node is dropped, as a real network drops a packet. The
// articles' channel network wedged on exactly that (Part 3).
package sim

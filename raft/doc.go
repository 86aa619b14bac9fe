// Package raft is coord's consensus core: a pure, deterministic state
// machine implementing the Raft protocol of the extended paper's Figure 2,
// with log compaction (§7), membership changes (one voter at a time,
// dissertation §4.1, or joint consensus, §4.3) with learners, pre-vote and check-quorum (§9.6),
// leadership transfer (§3.10) and ReadIndex reads (§6.4).
//
// The core does no I/O: messages and ticks go in, a Ready comes out (hard
// state and entries to persist, messages to send, committed entries to
// apply, a snapshot to install), and Advance confirms the Ready was handled.
// It has no goroutines, clocks, network or disk; randomness is injected
// through Config.Rand. A test checks that the package imports none of net,
// os, time, sync or math/rand.
//
// # The loop
//
//	for {
//		// on a tick: core.Tick(); on a message: core.Step(m)
//		if core.HasReady() {
//			rd := core.Ready()
//			storage.Save(rd.HardState, rd.Entries, rd.Snapshot) // and fsync if rd.MustSync
//			transport.Send(rd.Messages)                           // only after the save (a leader's appends may go first)
//			apply(rd.Snapshot, rd.CommittedEntries)
//			core.Advance(rd)
//		}
//	}
//
// The order matters: a message in a Ready (a granted vote, an append
// acknowledgement) promises that the same Ready's hard state and entries are
// on stable storage. In coord this loop is written once, as node.Handler,
// which the server, the simulator and the transcripts all run. Committed
// membership changes come with the membership the core worked out for them
// (Ready.ConfChanges): the application records it, and never works it out
// again.
//
// # Membership
//
// A configuration takes effect on a node as soon as its entry is in the
// node's log, committed or not, and is rolled back if the entry is
// truncated (dissertation §4.1). A leader proposes one change at a time, and
// only after it has committed an entry of its own term. A change of at most
// one voter applies directly; a change of more voters goes through joint
// consensus (§4.3): old and new voters decide together until the leader,
// once the joint entry commits, proposes leaving it. New voters must first
// catch up as learners. A leader that removes itself leads until the change
// commits, then steps down.
//
// # Storage
//
// Storage is read-only to the core; the caller writes what Ready asks for.
// MemoryStorage is the in-memory implementation used by tests and the
// simulator; the storage packages provide the durable one.
package raft

// Package raft is coord's consensus core: a pure, deterministic state
// machine implementing the Raft protocol of the extended paper's Figure 2,
// with log compaction, membership changes, pre-vote, check-quorum,
// leadership transfer and ReadIndex reads.
//
// The core does no I/O: messages and ticks go in, a Ready comes out (hard
// state and entries to persist, messages to send, committed entries to
// apply, a snapshot to install), and Advance confirms the Ready was handled.
// It has no goroutines, clocks, network or disk; randomness is injected.
package raft

// Package chaos proves a coord cluster under faults: it runs a cluster of
// real server processes (server/localcluster), concurrent clients writing
// and reading a few keys, and a nemesis that kills nodes (SIGKILL),
// pauses them (SIGSTOP, then SIGCONT), restarts them from their data
// directories, and partitions them through fault proxies between peers
// (connections cut and refused, or held silent as across a real partition).
// It records every operation's invocation, completion and result, and
// checks the history for linearizability with porcupine
// (github.com/anishathalye/porcupine).
//
// A write whose client gave up (a timeout during a fault) has an unknown
// outcome: the checker may place it anywhere after its invocation, or
// leave it out. An acknowledged write that a later read does not reflect,
// a read of a value nobody wrote, a revision that goes backwards, or a
// compare-and-swap that succeeded against the wrong revision all make the
// history non-linearizable. After the run the cluster is healed and every
// node is checked to hold the same final state.
package chaos

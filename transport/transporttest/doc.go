// Package transporttest is the conformance suite of Raft transports (any
// node.Transport), as fstest.TestFS is for file systems:
//
//	transporttest.Run(t, func(t *testing.T) transporttest.Pair { ... })
//
// It checks what the node shell relies on: every message type arrives
// intact; messages other than snapshots arrive in the order sent between
// one pair of nodes (Raft does not need it, but pipelined appends go
// faster with it); a large snapshot arrives whole; a send to an unknown or
// dead peer never blocks.
package transporttest

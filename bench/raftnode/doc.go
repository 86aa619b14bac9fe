// Package raftnode measures the node package alone: a cluster of
// node.Nodes in one process, each on its own durable storage
// (storage/raftstore, fsync on) and TCP transport on loopback, with
// proposals made straight on the leader. It is the yardstick the server's
// figures are held to (`coord cluster bench` prints it beside them): what
// consensus, the disk and the network allow on this machine, before HTTP,
// TLS, sessions and the server's state machine.
//
// Timing belongs here, in a command that prints figures, never in a
// pass/fail test.
package raftnode

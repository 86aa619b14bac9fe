// Package faultproxy is a TCP proxy for tests that breaks the network on
// purpose: put it between a client and a real server on loopback, then cut
// every connection at once (Cut), stall all traffic in both directions as a
// partition does (Blackhole), or refuse new connections (Reject).
//
// A blackhole holds bytes rather than dropping them, as TCP does across a
// partition: the sender's writes fill the kernel buffers and then block,
// reads on the other side see nothing, and when the partition heals
// (Blackhole(false)) the bytes already written arrive in order. A cut
// closes both sides with a reset, as a crashed middlebox or a rebooted
// peer would.
//
// The lease backends' tests use it to show that a backend which cannot
// reach its store says so (lease.ErrUnavailable) within its context's
// deadline, and the Raft cluster's tests to partition real processes.
package faultproxy

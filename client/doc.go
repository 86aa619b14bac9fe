// Package client is the Go client of a coord cluster (docs/API.md).
//
// A Client knows the HTTP addresses of some or all of the cluster's nodes.
// It needs no idea of which one leads: any node forwards a request to the
// leader. When an answer says it was forwarded, the client asks that node
// for the leader's address, in the background, and sends later requests
// straight there. When a node is down or has no leader, the client tries
// the next, with backoff, until its context is done.
//
// Writes are exactly-once: every Client has a random client id, every write
// a sequence number, and a retry resends the same pair, so the cluster
// applies a write at most once however often the client had to retry it,
// and answers a retry with the first attempt's result. A write whose
// context ends before any node answered has an unknown outcome: it may or
// may not have been applied (errors.Is(err, ErrUnknown)).
//
// Reads are linearizable unless made with Stale().
package client

// Package client is the Go client of a coord cluster (docs/API.md).
//
// A Client knows the HTTP addresses of some or all of the cluster's nodes.
// It sends its requests over coord's multiplexed connection (coord-wire/1,
// package apiwire: one connection per node for every request in flight),
// and over HTTP/1.1 to a node that does not serve it, found out on the
// first connection and tried again a minute later (Config.NoWire,
// Config.WireFallbackFor).
// It needs no idea of which one leads: any node forwards a request to the
// leader. Every answer names the node that gave it (Coord-Node) and the
// leader as that node knows it (Coord-Leader); the client remembers which
// node answers at each address, and sends later requests, and the next
// attempt of a failing one, straight to the leader an answer named. While
// in use it keeps a connection open to every node (a GET /healthz every
// Config.WarmInterval), so that when the leader fails, the next attempt
// goes over a connection already made (for HTTPS, no handshake) to a node
// it already knows. A leader it has no address for is looked up
// (/v1/status), at most once a second. When a node is down or has no
// leader, the client tries the others at once, then again after a short,
// jittered, growing wait (Config.BackoffMin to BackoffMax), until its
// context is done; a node that did not answer is tried last for a second.
// A 503 that names the leader is a redirect: the next attempt goes there at
// once, without the wait (once per named node between waits, so that nodes
// naming each other cannot spin).
//
// Config.AttemptTimeout says when a node is unreachable, not how long a
// live one may take to answer. An attempt past it at a node that answered
// another of the client's requests within the last AttemptTimeout is
// awaited: the node is making progress. Otherwise an attempt whose request
// is not even written (the dial or the TLS handshake is stuck) is
// abandoned, and one that is written but not answered is checked with the
// node's
// readiness probe (GET /readyz, one at a time per node, shared by its
// attempts): while the node answers that it is ready, the attempt is
// awaited, up to the caller's deadline, rather than abandoned and sent
// again through another node (which under overload only adds load and
// connections); when it does not answer, or is not ready, the attempt is
// abandoned and the call goes on to the next node. A killed node's
// connections are reset, so failover from it does not wait for any of
// this.
//
// Config.Spread sends the requests a follower serves itself (writes of
// keys, batches, acquires and releases, reads and watches of keys, stale
// reads) to the endpoints in turn instead of to the leader, skipping one
// that failed to answer in the last second: the members share the work of
// serving the client, at the cost of one more hop per write through a
// follower. Renewals, lease sessions and what else only the leader serves
// still go to the leader the client follows.
//
// Writes are exactly-once: every Client has a random client id, every write
// a sequence number, and a retry resends the same pair, so the cluster
// applies a write at most once however often the client had to retry it,
// and answers a retry with the first attempt's result. A write whose
// context ends before any node answered has an unknown outcome: it may or
// may not have been applied (errors.Is(err, ErrUnknown)), unless none of
// its attempts can have reached a node (a connection that could not be
// made, a request refused before it was served, or one still waiting for
// a free stream of its multiplexed connection: apiwire.ErrNotSent).
//
// Reads are linearizable unless made with Stale().
package client

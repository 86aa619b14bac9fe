// Package raftlease is a lease.Backend on coord's own Raft cluster:
// raft://HOST:PORT,HOST:PORT,...[?timeout=5s][&session=true], the HTTP
// addresses of some or all of the cluster's nodes (`coord cluster up`
// prints them).
//
// # Security
//
// A secure cluster (the default of coord cluster up) speaks HTTPS and
// wants a bearer token. The URL's parameters say how to reach it:
//
//	cacert=FILE      CA bundle the nodes' certificates must chain to
//	cert=FILE        client certificate, for a cluster run with --client-cert-auth
//	key=FILE         its private key
//	token_file=FILE  file holding the token
//	tls=true|false   force HTTPS on or off (default: on when a CA or a
//	                 certificate is named, or an endpoint is https://)
//
// What the URL leaves out comes from the environment that `coord cluster
// env` sets: COORD_ENDPOINTS (when the URL names no host: raft://),
// COORD_CACERT, COORD_CERT, COORD_KEY and COORD_TOKEN. The token itself
// never goes in the URL, which commands print and logs keep.
//
// Every operation is one command in the replicated log, applied by the
// cluster's state machine (package server) as one atomic step:
//
//   - Acquire succeeds only if the lease is free, and issues a fencing
//     token: the log index of the Acquire, greater than every token issued
//     before on the cluster.
//   - Renew and Release succeed only if the holder presents the current
//     token.
//   - Get and Watch read linearizably, through the leader.
//
// Writes go through client sessions, so a request retried after a lost
// answer or a leader change is applied once and answered as the first time
// (an Acquire that succeeded but whose answer was lost is not mistaken for
// a lease held by someone else).
//
// # Clock
//
// Expiry is measured by the cluster's leader, on its own monotonic clock,
// from the moment it applies an Acquire or Renew; a new leader gives every
// held lease its full TTL again from when it takes over, so a leader change
// can make a lease last longer, never shorter. Record.Expiry is on the
// caller's clock: the time the request was sent plus the TTL granted (or,
// for Get, the time the leader reported left). Wall clocks play no part:
// stepping any machine's clock changes nothing.
//
// A lease expires a little after its TTL: the leader checks once a tick
// (100 ms by default), then commits the expiry. A holder paused past its
// TTL may therefore still renew if nobody acquired the lease meanwhile,
// and more easily so if the cluster changed leader during the pause; no
// second holder can exist at any time, and the fencing token protects the
// resource either way.
//
// # Watch
//
// Watch long-polls the cluster (GET /v1/watch/leases/NAME), which answers
// as soon as the lease's revision changes: after an acquire, renew,
// release, or an expiry the leader applied. A watch that cannot reach the
// cluster closes its channel.
//
// # Sessions
//
// With session=true (Options.Session), the Backend is a
// lease.TenureWatcher: for each tenure an Elector holds, it keeps a session
// stream open to the leader (GET /v1/leases/NAME/session). The leader frees
// the lease a grace period (2 s by default) after the stream closes from
// this side, so that a holder killed with SIGKILL is replaced in about that
// time rather than its TTL. In return the holder steps down (ErrLost) when
// no event has come for half the grace and no new stream opened, or at once
// when the leader says the token is no longer current. The server's package
// doc ("Lease sessions") and docs/leases.md say why no two holders
// overlap. A holder that cannot open a stream keeps the lease by its TTL
// alone. WatchTenure works only for tenures acquired through the same
// Backend (the session names the holder).
//
// A cluster that has lost its majority answers nothing: every operation
// returns an error wrapping lease.ErrUnavailable once its context (bounded
// by the timeout parameter) ends, and an Elector steps down.
package raftlease

// Package etcd is a lease.Backend on an etcd cluster:
// etcd://host:port[,host:port...][?prefix=/coord/lease/], over TLS with
// cacert=CA.pem, cert=CLIENT.pem and key=KEY.pem (etcdctl's names) or
// tls=true (the system's roots).
//
// Part 2 of the articles ends on etcd and ZooKeeper as the stores that give
// a compare-and-swap on a key with a session TTL, and watches that push
// instead of polling. This backend uses exactly those: a key bound to an
// etcd lease, created by a transaction that succeeds only if the key does
// not exist, and a watch on the key.
//
// # Keys and tokens
//
// The lease named N is the key PREFIX+N (prefix /coord/lease/ by default),
// whose value is the holder, attached to an etcd lease granted with the TTL.
// The fencing token is the key's create revision: etcd's revision counts
// every change in the whole cluster and never goes back, so a key created
// later has a greater create revision, across holders, client crashes,
// member restarts and leader changes. While the lease is free there is no
// key, and Record.Token is 0 (the store does not say what the last one was).
//
// # Operations
//
//   - Acquire: Grant an etcd lease of TTL (rounded up to whole seconds, and
//     to at least the cluster's minimum, about 2 s with the default election
//     timeout), then Txn(If CreateRevision(key) == 0, Then Put(key, holder,
//     lease), Else Get(key)). A lost race revokes the unused etcd lease.
//   - Renew: KeepAliveOnce on the key's etcd lease, then a Get that checks
//     that the key still has the token's create revision, the holder, and
//     that etcd lease. A Renew asking for more time than the etcd lease was
//     granted moves the key to a new etcd lease, in a Txn on the same checks.
//   - Release: Txn(If CreateRevision(key) == token and Value(key) == holder,
//     Then Delete(key)), then Revoke of its etcd lease.
//   - Watch: an etcd watch on the key from the revision the first Get read,
//     with WithRequireLeader, so that a member cut off from the cluster's
//     leader ends the watch instead of serving stale silence. Expiry is
//     pushed too: etcd deletes the key when its lease expires. A renewal
//     changes nothing that a watch can see (the key is untouched), so
//     watchers receive acquisitions, releases and expirations only.
//
// # One renewal, one keep-alive request
//
// The etcd client's KeepAlive keeps a lease alive from a goroutine of its
// own, on one stream, for as long as the client lives. That is the wrong
// owner here: the Elector decides when to renew, and its promise (it steps
// down before anyone else can acquire) depends on the store's expiry being
// measured from the Elector's own renewals. A background keep-alive would
// keep a lease alive for a holder that is stuck, and hide a store that has
// stopped answering behind a goroutine's retries. So each Renew sends one
// keep-alive request, KeepAliveOnce, on a short stream multiplexed over the
// client's single gRPC connection: one extra HTTP/2 stream open and close
// per renewal, every few seconds, measured by `coord bench latency`.
//
// # Clock
//
// Expiry is kept by the etcd leader, on its monotonic clock, and is never
// shortened by a clock step. When leadership moves, the new leader extends
// every lease by the election time, so a lease can outlive its TTL, never
// fall short of it. Clients' clocks do not matter.
//
// # Guarantees
//
//   - At most one holder per name at a time, as long as a majority of the
//     cluster's members is up and connected: every change is a
//     linearizable transaction.
//   - Tokens only grow, as long as the cluster keeps its data (restoring an
//     old snapshot, or wiping the data directory, starts the revisions
//     again).
//   - An operation that cannot reach a member with a leader returns an error
//     wrapping lease.ErrUnavailable when its context is done (or after 5 s
//     if it has no deadline).
//   - Works with etcd 3.4 and later (Debian 12 ships 3.4; the client is
//     3.7, and the v3 API they share is all it uses).
//
// # What it does not guarantee
//
//   - A holder that dies is not noticed before its TTL runs out (at least
//     the cluster's minimum TTL).
//   - TTLs are whole seconds: a 1.5 s TTL is granted as 2 s (the Record's
//     Expiry says so).
package etcd

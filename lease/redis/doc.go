// Package redis is a lease.Backend on one Redis server:
// redis://[user:password@]host:port/db[?prefix=coord:&keyspace=auto], or
// over TLS rediss://host:port/db?cacert=CA.pem&cert=CLIENT.pem&key=KEY.pem
// (redis-cli's names; the server's certificate must name host, and chain to
// cacert, or to the system's roots without it).
//
// Part 2 of the articles names SET NX PX as the operation that closes the
// lock file's hole, because it creates the value and its expiry in one
// command. This backend acquires with exactly that, inside a Lua script
// that also issues the fencing token and announces the change, so that the
// whole acquisition is one atomic step on the server.
//
// # Keys
//
// For a lease named N, with the default prefix "coord:":
//
//	coord:{N}:lease   "TOKEN:HOLDER", with a PX expiry (absent when free)
//	coord:{N}:token   the last token issued for N, an INCR counter without expiry
//	coord:changes     a pub/sub channel; every change publishes N
//
// The braces keep both keys of a lease in one hash slot, should the server
// ever be a cluster node.
//
// # Operations
//
//   - Acquire: one script. If the lease key exists, the lease is held: the
//     script returns it. Otherwise INCR the counter, SET the key NX PX ttl,
//     PUBLISH. A failed attempt does not burn a token.
//   - Renew: one script. PEXPIRE only if the key still holds "TOKEN:HOLDER"
//     exactly; PUBLISH.
//   - Release: one script. DEL only if the key still holds "TOKEN:HOLDER"
//     exactly; PUBLISH.
//   - Get: one script reading the key, its PTTL and the counter together.
//   - Watch: SUBSCRIBE to the changes channel, and to the expired-key
//     event channel (__keyevent@DB__:expired) when the server emits it; plus
//     a timer at the expiry the watcher last read, because the server
//     reports a key as expired to readers at once but deletes it (and emits
//     the event) only when its expiry cycle gets to it, up to ~100 ms later.
//     With keyspace=auto (the default) the first Watch adds "Ex" to the
//     server's notify-keyspace-events if it is missing (CONFIG SET, additive:
//     flags already set are kept); if CONFIG is refused (a managed Redis) it
//     logs at debug level and relies on the timer. keyspace=off never
//     touches the server's configuration. A watch that loses its connection
//     closes its channel; the caller watches again.
//
// # Clock
//
// Expiry is the Redis server's: it stores each key's expiry as an absolute
// time on its own wall clock. A step of that clock (NTP, an operator) moves
// every lease's expiry with it: forward, and leases expire early, while
// their holders still believe they hold them. Keep the server's clock
// slewed, never stepped. Clients' clocks do not matter.
//
// # Guarantees
//
//   - At most one holder per name at a time, as long as the one server keeps
//     its data: every operation is one script, and scripts run one at a
//     time.
//   - Tokens only grow, across holders and client crashes, and across
//     server restarts only with appendonly yes and appendfsync always: with
//     RDB snapshots or no persistence, a restart forgets the counter (and the
//     lease) and tokens start again from 1.
//   - An operation that cannot reach the server returns an error wrapping
//     lease.ErrUnavailable when its context is done (or after 5 s if it has
//     no deadline). Commands are never retried by the client: a reply lost
//     on the way back leaves the outcome unknown, and the caller decides.
//
// # What it does not guarantee
//
//   - One Redis instance, not Redlock. With a replica and failover, an
//     acquire acknowledged by a primary that dies before replicating it is
//     lost, and a second holder acquires on the promoted replica. Redlock
//     (a majority of independent instances) does not fix this without
//     fencing either, and depends on bounded clock drift and pauses; coord
//     does not implement it. Use etcd or coord's Raft cluster when the store
//     itself must survive a machine.
//   - Eviction: under maxmemory with an eviction policy other than
//     noeviction, Redis may evict the lease key (it has a TTL) or the counter
//     (under allkeys-*), which breaks exclusivity or fencing. Run it with
//     maxmemory-policy noeviction, or on a server of its own.
//   - A holder that dies is not noticed before its TTL runs out.
//   - A change made by hand (DEL of a lease key) is seen by watchers only at
//     their next timer; coord's own changes are always published.
package redis

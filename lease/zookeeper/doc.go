// Package zookeeper is a lease.Backend on a ZooKeeper ensemble:
// zk://[user:password@]host:port[,host:port...][/chroot][?session_timeout=10s&timeout=5s].
//
// Part 2 of the articles names "etcd or ZooKeeper, which give us a
// compare-and-swap on a key along with a session TTL, and which push
// notifications to watchers". This backend uses ZooKeeper as it intends: a
// lease is an ephemeral node, which lives exactly as long as the session
// that created it, and watchers are told when it goes.
//
// # Nodes and tokens
//
// The lease named N is the ephemeral node CHROOT/N; its data is the
// holder. The chroot must exist (Open checks, and that its ACL lets this
// client create and delete there). A lease is free when the node does not
// exist; nothing else is stored, so a free Record's token is 0.
//
// The fencing token is the node's czxid: the zxid of the transaction that
// created it. A zxid numbers every change of the whole ensemble, in the
// order the leader committed them: its high 32 bits are the leader's epoch,
// which every election of a leader increases, and its low 32 bits count the
// transactions of that epoch. So a node created later has a greater czxid,
// across holders, client crashes, server restarts and leader changes: a
// restarted server continues from the last zxid of its transaction log (it
// acknowledges a transaction only once logged, and fsyncs the log first
// unless forceSync=no), and a new leader starts a greater epoch. Tokens
// repeat only if the ensemble loses its data (a wiped or restored data
// directory starts the zxids again): the fenced resource must then be reset
// with it. A client that saw a later zxid than a server has refuses that
// server (ZooKeeper will not let a client go back in time), so a holder
// never renews against such a server: its lease stays suspended (below).
//
// # One session per lease
//
// A ZooKeeper session's timeout is fixed when it starts, and an ephemeral
// node belongs to one session. So each Acquire opens a session of its own
// with the TTL as its timeout, and the lease's node lives in it; the
// Backend keeps one more, shared session for Get, Watch and the read that
// precedes each Acquire. A TTL longer than the server grants a session
// (its maxSessionTimeout, 40 s by default) is refused with
// lease.ErrInvalid rather than silently shortened; a shorter one than it
// grants (minSessionTimeout, 4 s by default) is granted longer, and the
// Record's Expiry says so.
//
//   - Acquire: read the node on the shared session (a held lease costs no
//     session); if free, open the tenure's session and create the node
//     ephemeral, in one transaction with a set of its data, whose reply
//     carries the node's stat (the czxid, the owning session). The create
//     fails if the node exists: one winner.
//   - Renew: read the node on the tenure's session, which proves the
//     session alive to the server (every request resets its timeout), and
//     check that it is still owned by that session with the same czxid. A
//     Renew asking for more than the session was granted moves the node to
//     a new, longer session: one transaction deletes it (if its version is
//     unchanged) and creates it again on the new session, with the token in
//     its data ("\x00TOKEN\x00HOLDER"), since the new node's czxid is later.
//   - Release: the same check, then a delete of the node at the version
//     read, on the tenure's session; then the session is closed.
//   - Watch: a ZooKeeper watch set by each read of the node on the shared
//     session (a data watch if it exists, an exists watch if not), so that
//     nothing between a read and its watch is missed. Deletion is pushed,
//     whether by a release, a closed session or an expired one.
//   - Close: closes every session. The server deletes a closed session's
//     ephemeral nodes at once, so a holder that closes its Backend (or
//     exits on SIGTERM without releasing) frees its leases at once, unlike
//     the other backends.
//
// A Backend can renew or release only what it acquired: no other client
// can keep a session alive or close it. Renew and Release of a current
// tenure acquired through another Backend fail with lease.ErrInvalid.
//
// # The session rule: suspended, lost, kept
//
// The client pings the server on its own (every third of the timeout)
// and reconnects on its own, to any server of the ensemble, within the
// session. While it is disconnected it cannot know whether the server
// still holds the session or has expired it and let someone else in (the
// classic bug is a leader that goes on acting then, Curator's SUSPENDED
// taken for still-leading). So:
//
//   - Suspended: with no connection, every operation of the tenure waits
//     for one until its context is done, then fails with
//     lease.ErrUnavailable ("session suspended"). Requests are sent only on
//     a connected session, so one queued while disconnected is never sent
//     long after its caller gave up. The Elector counts its renew deadline
//     from the start of its last successful Renew, on its own monotonic
//     clock; the server counts the session timeout from the last request
//     or ping it received, which came later. So the Elector steps down
//     before the server can expire the session and let another holder in.
//   - Lost: if the server says the session expired (the client reconnected
//     too late), or the node is gone or no longer the session's, Renew and
//     Release fail with lease.ErrLost. The zk client opens a new session in
//     place of an expired one by itself; the tenure never moves to it.
//   - Kept: if the client reconnects within the session, the next Renew
//     finds the node still owned by the session and succeeds, with the same
//     token.
//
// The client's pings keep a session alive for as long as its process
// lives, even if the holder stops renewing: the server cannot tell a stuck
// holder from a quiet one. The contract wants the lease gone at the TTL
// after the last renewal, so the tenure keeps a deadline of its own, the
// send time of its last successful Acquire or Renew plus the granted
// timeout, on this process's monotonic clock, and closes the session when
// it passes (the server then deletes the node at once); a Renew after it
// is lease.ErrLost. A holder that is stopped, dead or cut off stops
// pinging as well, and the server expires its session a timeout after the
// last contact. Either way the lease ends no earlier than its deadline.
//
// # Clock
//
// Session expiry is the server's, on its monotonic clock, in ticks
// (tickTime, 2 s by default): a session expires at the first tick after
// its timeout, never before it. A wall-clock step changes nothing. When
// the leader changes, the new leader gives every session a fresh timeout,
// so a lease can outlive its TTL, never fall short of it.
//
// # Guarantees
//
//   - At most one holder per name at a time, as long as a majority of the
//     ensemble is up: the create is a transaction the leader orders.
//   - Tokens only grow, as long as the ensemble keeps its data (above).
//   - A holder that stops renewing loses the lease at its deadline; one
//     that dies, at its session timeout; one that releases or closes its
//     Backend, at once. Watchers are told in each case.
//   - An operation that cannot reach a server returns an error wrapping
//     lease.ErrUnavailable when its context is done (or after 5 s if it
//     has no deadline). Reads (Get, Renew's check, Watch) retry across a
//     cut connection within their context; writes are never retried.
//   - Bad input: a bad URL is lease.ErrInvalid at once; an unreachable
//     ensemble is lease.ErrUnavailable at Open's deadline (naming the last
//     dial error); a missing chroot, or a chroot whose ACL refuses this
//     client (zk.ErrNoAuth), is lease.ErrInvalid at Open. A node at a
//     lease's path that coord did not write (not ephemeral, no holder, a
//     token that cannot be) is lease.ErrCorrupt, and left alone.
//   - Tested with ZooKeeper 3.8 (Debian 12's); it uses no request that
//     3.4 lacks (multi among them).
//
// # What it does not guarantee
//
//   - A holder that dies is not noticed before its session times out.
//   - Get of another's lease reports a zero Expiry: the server alone knows
//     when that session will expire (every renewal and ping postpones it).
//     An Elector's candidates, which use the Expiry to wait, retry Acquire
//     every RetryPeriod besides the watch; each retry is one read.
//   - Every candidate watches the one node, so a release wakes them all
//     (the herd effect the ephemeral-sequential recipe avoids, at the cost
//     of a queue the Backend interface has no use for: Acquire does not
//     wait).
//   - Each Acquire opens a TCP connection and a session (a transaction),
//     and each Release closes one: acquiring costs more than renewing (see
//     `coord bench latency`). A Backend holds one connection, plus one per
//     lease it holds; a server limits the connections from one address
//     (maxClientCnxns, 60 by default).
//   - The TLS transport and SASL are not supported; digest authentication
//     is (user:password in the URL), with the lease nodes then readable and
//     writable by that user alone.
package zookeeper

// Package postgres is a lease.Backend in a PostgreSQL table:
// postgres://user:password@host:port/db?sslmode=...[&table=coord_lease&advisory=false&listen=true&poll=200ms].
// TLS is pgx's, with libpq's parameters: sslmode=verify-full with
// sslrootcert, sslcert and sslkey checks the server's chain and name and
// presents a client certificate; pgx's default, prefer, checks nothing.
//
// Part 2 of the articles names the relational version of the lock file's
// O_EXCL: an INSERT against a unique constraint, with the expiry a column
// that a takeover compares. Here each operation is one statement, so the
// database's row lock makes it atomic, and every expiry is computed and
// compared on the server's clock (clock_timestamp()), never the client's.
//
// # Table
//
// Created on Open if missing (the name is the table parameter):
//
//	CREATE TABLE coord_lease (
//	    name   text PRIMARY KEY,
//	    holder text NOT NULL DEFAULT '',  -- empty when free
//	    token  bigint NOT NULL,           -- the last token issued for name
//	    expiry timestamptz,               -- server time; NULL when free
//	    live   boolean NOT NULL DEFAULT false -- holder holds an advisory lock
//	);
//
// with a trigger that runs pg_notify('coord_lease', name) after every
// change of a row. Rows are never deleted: Release empties holder and keeps
// token, so the next Acquire issues token+1, whatever ended the lease.
//
// # Operations
//
//   - Acquire: INSERT ... ON CONFLICT (name) DO UPDATE SET token = token + 1
//     ... WHERE the lease is free or expired (expiry <= clock_timestamp()),
//     RETURNING the token. One statement: two contenders serialize on the
//     row, and the second sees the first's update.
//   - Renew: UPDATE ... SET expiry = clock_timestamp() + ttl WHERE holder and
//     token match and the lease has not expired.
//   - Release: UPDATE ... emptying holder and expiry, WHERE holder and
//     token match and the lease has not expired.
//   - Watch: LISTEN on a connection of its own; every notification about
//     the name, and the expiry the watcher read, wake it to read the row.
//     With listen=false it polls instead (every poll interval, with 20 %
//     jitter, and at the expiry it read). With advisory=true, a second
//     connection waits for a live holder's advisory lock (below).
//
// # Advisory locks (advisory=true)
//
// The holder also takes a session-level advisory lock for the name, on a
// connection the Backend keeps for the purpose, and the row records that
// (live). A client that can take that advisory lock knows the holder's
// session has ended (PostgreSQL releases a session's locks when its
// connection closes, as the kernel releases a dead process's flock): Get
// reports such a lease free, and Acquire takes it over at once, without
// waiting for the TTL, whether or not the client itself uses advisory=true.
//
// No notification announces a closed session, but a lock request does: a
// watcher with advisory=true, while the row marks its holder live, keeps a
// second connection blocked in SELECT pg_advisory_xact_lock_shared(...)
// on the name's lock. PostgreSQL grants it the moment no session holds the
// lock exclusively (the holder's session ended, or it released, which
// unlocks); the lock, transaction-scoped, is let go as the statement
// commits, and the watcher reads the row at once, so that an Elector's
// candidate learns of the death within milliseconds of the server noticing
// it. A grant is only a reason to read; the read decides. An error (a
// server restart, a cut connection) proves nothing: the watcher goes on
// reading at notifications and expiries, and waits again a second later.
// The instant a watcher holds the lock shared makes a new holder's
// try-lock fail, so Acquire, when its try fails while nobody holds the
// lock exclusively, tries again for up to 31 ms; after that its tenure is
// marked not live, protected by its TTL alone, as when a stale session
// holds the lock. A watcher without advisory=true does not wait: it
// learns of a closed session at its next read (a notification, the expiry,
// or every 5 s with LISTEN), and a plain client's Acquire does not retry.
//
// The price of advisory=true: the
// lease now also ends when the holder's connection does (a server restart,
// pg_terminate_backend, a network cut that the server notices), and the
// holder learns of it only at its next Renew, which then fails with
// lease.ErrLost. Until then two processes may both believe they lead; the
// fencing token still tells them apart. Without advisory=true (the
// default), a holder that dies keeps the lease until its TTL runs out, and
// the Elector's guarantee (it steps down before anyone else can acquire)
// holds whatever happens to connections.
//
// # Behind a connection pooler
//
// The lease table works through any pooler (PgBouncer in session,
// transaction or statement mode, pgpool, RDS Proxy): every operation is
// one statement in its own implicit transaction. In transaction or
// statement mode, add default_query_exec_mode=exec (or simple_protocol) to
// the URL, since older PgBouncers do not support named prepared statements.
// Two things need a session of their own, which a transaction pooler does
// not give: LISTEN (a watcher may never hear a notification; use
// listen=false there, or point watchers at the server directly), and
// advisory=true (a session lock on a pooled server connection is released,
// or kept, at the pooler's whim: never use it through a transaction
// pooler).
//
// # Clock
//
// Expiry is the PostgreSQL server's wall clock (clock_timestamp()). A step
// of that clock moves every lease's expiry with it: forward, and leases
// expire early while their holders still believe they hold them. Keep the
// server's clock slewed, never stepped. Clients' clocks do not matter.
//
// # Guarantees
//
//   - At most one holder per name at a time, on one server (or a primary
//     and synchronous replicas). After an asynchronous replica is promoted,
//     an acquire the old primary acknowledged may be lost.
//   - Tokens only grow, across holders, client crashes and server restarts
//     (a committed update survives a restart, with the usual fsync
//     settings).
//   - An operation that cannot reach the server returns an error wrapping
//     lease.ErrUnavailable when its context is done (or after 5 s if it has
//     no deadline).
//
// # What it does not guarantee
//
//   - Without advisory=true, a holder that dies is not noticed before its
//     TTL runs out.
//   - With advisory=true, see above: a holder can lose the lease before its
//     TTL and learn it only at its next renewal.
//   - With advisory=true, a death is noticed as fast as the server notices
//     the closed connection: at once for a process that dies (its kernel
//     closes the socket), but not before TCP keepalives or a timeout for a
//     machine that vanishes or a network that cuts silently. Each watcher
//     uses a second connection, and a watcher whose wait failed goes
//     without it until its next read a second later.
//   - A holder that acquires while a watcher's instant of the lock lasts
//     longer than 31 ms (an overloaded server) gets a tenure protected by
//     its TTL alone: its own death is then noticed at its expiry.
package postgres

// Package sqlite is a lease.Backend in an SQLite database file, for
// processes on one machine: sqlite:///var/lib/app/leases.db.
//
// It uses modernc.org/sqlite, a pure Go SQLite (no cgo), in WAL mode with a
// busy timeout, and runs every operation as one BEGIN IMMEDIATE
// transaction: SQLite's write lock is the atomic compare-and-swap, the way
// an INSERT against a unique constraint is the relational O_EXCL.
//
// # Format
//
// One table, created on Open if missing:
//
//	CREATE TABLE coord_lease (
//	    name   TEXT PRIMARY KEY,
//	    holder TEXT NOT NULL,    -- empty when free
//	    token  INTEGER NOT NULL, -- the last token issued for name
//	    expiry INTEGER NOT NULL, -- CLOCK_BOOTTIME nanoseconds; 0 when free
//	    boot   TEXT NOT NULL     -- the kernel's boot id when expiry was set
//	) STRICT, WITHOUT ROWID;
//
// A row is never deleted: Release empties holder and keeps token, so the
// next Acquire issues token+1 however the lease ended.
//
// # Clock
//
// Expiry is on the machine's CLOCK_BOOTTIME, which every process on the
// machine shares, which never steps (unlike the wall clock under NTP or an
// operator's date command), and which keeps counting through suspend. It
// restarts at zero on reboot, so each row also records the boot id
// (/proc/sys/kernel/random/boot_id): a lease written in an earlier boot is
// expired, since every process that held it died with that boot. Processes
// in different time namespaces (a container with its own boot-time offset)
// must not share a database; on systems other than Linux the wall clock is
// used instead and a clock step moves every expiry with it.
//
// # Guarantees
//
//   - At most one holder per name at a time, among every process that opens
//     the same file on the same machine: the write lock serializes
//     operations, and each decides on the state it reads under that lock.
//   - Tokens only grow, across holders, crashes and restarts of the clients:
//     the database runs with synchronous=FULL, so a committed Acquire
//     survives a power loss too. A token is one above the last and at least
//     the wall clock in microseconds, so tokens keep growing when the file
//     is deleted, replaced by an empty one, or lost with a tmpfs at reboot,
//     as long as the wall clock is not set back across the loss to before
//     the last token was issued.
//   - A client that cannot get the write lock (another process holds it,
//     the disk is stuck) returns an error wrapping lease.ErrUnavailable when
//     its context is done or the busy timeout (Config.BusyTimeout) runs out,
//     whichever is first.
//
// # What it does not guarantee
//
//   - Not for several machines: SQLite over NFS or SMB is unsafe, because
//     those file systems' locks are not reliable. Use lease/postgres, redis
//     or etcd across machines.
//   - A holder that dies is not noticed before its TTL runs out: the
//     database cannot tell a dead process from a slow one. The file backend
//     (lease/file) can, through a socket the kernel closes with the process.
//   - Watch polls (every Config.PollInterval, with jitter, and at the
//     expiry it read): SQLite has no way to push a change to another
//     process.
//   - Restoring an old copy of the file brings back its tokens; the clock
//     floor keeps the next token above the old copy's, not above tokens
//     issued after the copy if the clock was set back since.
package sqlite

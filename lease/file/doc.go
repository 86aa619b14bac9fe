// Package file is the lease backend for processes on one machine: a lock
// file done right. It registers the URL scheme "file":
//
//	file:///path/to/leader.lock
//
// The lock file's base name ("leader.lock") is the default lease name; a
// Backend serves other names as other lock files in the same directory.
//
// # What it fixes
//
// The articles' lock file (Part 2) fails in five ways; each has a fix here.
//
//   - Stat-then-create races, and remove-then-create takeover lets two
//     watchers both win. Here every change is a compare-and-swap made under
//     an exclusive flock(2) of a guard file that is never deleted or
//     replaced, so exactly one of any number of racing contenders wins.
//   - Create-then-write leaves an empty file that wedges everyone. Here the
//     record is written to a temporary file that then takes the lock file's
//     place atomically (an exchange of the two names): the lock file holds
//     either the complete new record or the previous one. A lock file that is
//     empty, truncated or garbage anyway (touch, an editor, a disk) is
//     repaired under the guard and the repair is logged; nobody is wedged.
//   - A dead holder costs a whole TTL plus a watch interval. Here a holder
//     listens on a unix socket for its tenure (".NAME.TOKEN.sock"); the
//     kernel closes it when the process dies, however it dies. Watchers
//     hold a connection to it and read EOF at once; a connect that is
//     refused proves the holder dead, and Acquire takes over a dead
//     holder's lease without waiting for its expiry. A holder that is alive
//     but stuck (SIGSTOP, a swap storm) still accepts connections in the
//     kernel's backlog, so it keeps its lease until the TTL runs out.
//   - Whole-second wall-clock comparisons make a 9 s lease last up to 12 s
//     and depend on the wall clock. Here expiry is CLOCK_MONOTONIC in
//     nanoseconds, the clock every process of one boot shares (and the one
//     Go's time.Now uses for durations), tagged with the boot id
//     (/proc/sys/kernel/random/boot_id) so that a record written before a
//     reboot counts as expired.
//   - Renew and release that do not check who holds the lease let a paused
//     leader overwrite or delete its successor's lease. Here both check the
//     token under the guard; a stale holder changes nothing, gets ErrLost,
//     and steps down.
//
// Watchers wake on changes, not on a poll: inotify on the directory (the
// lock file replaced), EOF on the tenure socket (death or release),
// and a timer at the expiry they last read.
//
// # Files
//
// For a lease NAME in directory DIR:
//
//	DIR/NAME                 the lock file: the current record (replaced
//	                         atomically: renameat2 RENAME_EXCHANGE, or rename)
//	DIR/.NAME.guard          flock target for every compare-and-swap; two slots
//	                         holding the token high-water mark; never deleted
//	DIR/.NAME.TOKEN.sock     the tenure socket of the holder of TOKEN
//	DIR/.NAME.tmp-*          a record being written, or the one just replaced
//	                         (removed at once; one left by a writer that died
//	                         is removed by the next acquisition)
//
// # Formats
//
// The lock file is one line:
//
//	coord-lease/v1 <crc32c> <json>\n
//
// where <crc32c> is the Castagnoli CRC-32 of the JSON bytes as 8 hex digits
// and the JSON object has the fields name, holder ("" when free), token,
// pid, boot (the boot id), expires_mono_ns (CLOCK_MONOTONIC nanoseconds),
// ttl_ns and written (wall clock, for people only; never compared). Any
// other content is damage, repaired under the guard.
//
// The guard file holds four slots of 1024 bytes, each one line
// "<magic> <crc32c> <json>\n" padded with newlines:
//
//	offset 0, 1024     coord-guard/v1    tenure slots: seq, token (the last one
//	                                     issued), holder, pid, ttl_ns, boot
//	offset 2048, 3072  coord-reserve/v1  reservation slots: seq, reserved
//
// Each pair is written alternately (slot seq%2, seq one higher than the
// last), so a torn write damages one slot and the valid slot with the
// higher seq wins. The tenure slot is written on every acquisition and not
// fsynced: within a boot it is exact, since every process reads the page
// cache. The reservation is the durable high-water mark: every token ever
// issued is at most reserved, and a token above it is used only after a new
// reservation (1024 tokens further) has been written and fsynced. After a
// reboot (the tenure slot's boot id differs) or when the tenure slot is
// damaged, the next token is reserved+1. So fencing tokens only grow, even
// when the lock file is garbage or deleted, across crashes and reboots, and
// only one acquisition in 1024 pays for an fsync (tokens may jump by up to
// 1024 after a machine crash).
//
// # The compare-and-swap
//
// Acquire, under the guard: read the slots and the lock file; the tenure
// with the highest token holds the lease unless it was released, belongs to
// an earlier boot, its socket refuses connections, or its expiry passed. If
// held, return ErrHeld. Otherwise take the next token (fsyncing a new
// reservation first if it is beyond the current one), listen on the new
// tenure's socket, write the tenure slot, write the lock file (temporary
// file, exchanged into place), and remove what dead processes left behind
// (sockets of earlier tenures, temporary records). A crash at
// any step leaves either the old tenure current or a new one whose socket
// is dead, that is, a free lease.
//
// Renew and Release, under the guard: the same assessment; unless the
// token and holder are current (and, for Renew, unexpired), change nothing
// and return ErrLost. Release writes a free record (holder "", token kept)
// before closing the tenure socket.
//
// # Durability
//
// Only the guard's reservation slots are fsynced (before a token they cover
// is used). The lock file is not: its record means nothing after a reboot (the
// boot id marks it expired), and within a boot every process reads the
// page cache, where replacing a name is atomic. A machine crash may leave the lock
// file stale, empty or garbage; the next operation repairs it from the
// guard. So a renewal or a release costs no fsync, and an acquisition one
// in 1024 times.
//
// # Limits and caveats
//
// The guard is taken with LOCK_NB and a short backoff bounded by the
// caller's context, never a blocking flock, so a process stopped inside its
// critical section (a millisecond or so per operation) delays the others
// until it continues or dies, and their operations meanwhile fail with
// ErrUnavailable rather than hang.
//
// A tenure belongs to the Backend that acquired it: closing that Backend,
// or the death of its process, ends the tenure at once for everyone else.
//
// The clock is CLOCK_MONOTONIC, which stops while the machine is suspended;
// every lease on the machine pauses with it, holders' deadlines included.
//
// NFS and other network filesystems: this backend is for one machine. Over
// NFS, flock is emulated with byte-range locks whose recovery depends on
// the server's grace period, rename is atomic on the server but clients
// cache attributes and may read a stale lock file, inotify does not see
// other clients' changes, a unix socket file cannot be connected to from
// another machine (so a remote holder would look dead), and monotonic
// clocks and boot ids differ between machines. Open refuses directories on
// NFS, SMB/CIFS, 9P and FUSE filesystems. Between machines, use a store
// built for it (lease/etcd, lease/redis, lease/postgres, or coord's Raft
// cluster).
//
// What it does not guarantee: a leader that is paused after checking its
// lease and before acting can act after its lease has passed to another.
// Pass the fencing token to the resource it writes to; see package lease.
package file

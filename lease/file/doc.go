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
//     watchers both win. Here every change is a compare-and-swap: the next
//     version of the record is created with link(2), which fails if that
//     version exists, so exactly one of any number of racing contenders
//     wins, and no lock is held that a stopped process could keep.
//   - Create-then-write leaves an empty file that wedges everyone. Here a
//     record is written in full to an unnamed file (O_TMPFILE) before it
//     gets its name: a record file is complete or absent. The lock file is
//     a copy of the current record, swapped in atomically; nobody decides
//     anything from it, and one that is empty, truncated or garbage (touch,
//     an editor, a disk) is rewritten by the next operation, which logs the
//     repair. A damaged record file is skipped, logged and removed.
//   - A dead holder costs a whole TTL plus a watch interval. Here a holder
//     listens on a unix socket for its tenure, in the abstract namespace,
//     where there is no file to delete; the kernel closes it when the
//     process dies, however it dies. Watchers hold a connection to it and
//     read EOF at once; a connection refused proves the tenure over, and
//     Acquire takes over a dead holder's lease without waiting for its
//     expiry. A holder that is alive but stuck (SIGSTOP, a swap storm)
//     still accepts connections in the kernel's backlog, so it keeps its
//     lease until the TTL runs out.
//   - Whole-second wall-clock comparisons make a 9 s lease last up to 12 s
//     and depend on the wall clock. Here expiry is CLOCK_MONOTONIC in
//     nanoseconds, the clock every process of one boot shares (and the one
//     Go's time.Now uses for durations), tagged with the boot id
//     (/proc/sys/kernel/random/boot_id) so that a record written before a
//     reboot counts as expired.
//   - Renew and release that do not check who holds the lease let a paused
//     leader overwrite or delete its successor's lease. Here both are the
//     same compare-and-swap on the record's token; a stale holder changes
//     nothing, gets ErrLost, and steps down.
//
// Watchers wake on changes, not on a poll: inotify on the directory (a
// record file linked, the directory moved), EOF on the tenure socket
// (death or release), and a timer at the expiry they last read.
//
// # Files
//
// For a lease NAME in directory DIR:
//
//	DIR/.NAME.vN            version N of the record (N = 1, 2, ...); the
//	                        current record is the valid one with the highest N
//	DIR/NAME                the lock file: a copy of the current record, for
//	                        people (replaced atomically: renameat2
//	                        RENAME_EXCHANGE, or rename)
//	DIR/.NAME.reserve       token reservations, written only when a token runs
//	                        ahead of the wall clock (see Tokens)
//	DIR/.NAME.tmp-DIGITS    the lock file's copy being written, or the one just
//	                        replaced (removed at once; one a minute old is a dead
//	                        writer's, removed by the next commit)
//
// and, outside the directory, in the kernel's abstract socket namespace:
//
//	@coord-lease/v2/HASH/TOKEN/TTL_NS/N   the tenure socket of TOKEN, acquired
//	                                      for TTL_NS by committing version N;
//	                                      HASH is 24 hex digits of the SHA-256
//	                                      of the lock file's path
//
// # Formats
//
// Record files and the lock file hold one line:
//
//	coord-lease/v2 <crc32c> <json>\n
//
// where <crc32c> is the Castagnoli CRC-32 of the JSON bytes as 8 hex digits
// and the JSON object has the fields name, version (N of its file name), id
// (random, naming this version), prev (the id of the version it replaced),
// holder ("" when free), token, pid, boot (the boot id), netns (the inode
// of the holder's network namespace), socket (the tenure socket's abstract
// name), expires_mono_ns (CLOCK_MONOTONIC nanoseconds), ttl_ns and written
// (wall clock, for people only; never compared). Anything else, a record
// whose name or version disagree with its file name, or a file longer than
// 4096 bytes, is damage.
//
// The reservation file holds two slots of 1024 bytes, each one line
// "coord-reserve/v1 <crc32c> <json>\n" padded with newlines, with the
// fields seq and reserved; slot seq%2 is written, and the valid slot with
// the higher seq wins.
//
// # The compare-and-swap
//
// Every operation lists the directory, reads the current record (the valid
// record file with the highest version), decides, and writes the next
// version N+1 (N the highest version number among the record files, valid
// or not): the record is written to an unnamed file, which is then linked
// as .NAME.v(N+1). link(2) fails if the name exists, so of the processes
// that read the same state exactly one writes the next one; the others
// read again and decide again. Nothing is locked: a process stopped at any
// instant, inside any operation, blocks nobody.
//
// A process stopped between its read and its link wakes with a stale
// decision, and by then its version number may have been taken and
// removed (versions more than 16 below the newest are removed, oldest
// first). So after linking, a writer confirms: the version it replaced
// must still be there, unchanged (same id), and any version above its own
// must name it as its predecessor. Otherwise its link is stale: it removes
// it and reads again. This suffices because versions are removed oldest
// first: had its number been taken and removed before, its predecessor
// (a lower number) would be gone too; and a version above it that does not
// name it was linked from a state its decision never saw. Between the
// stale link and its removal (microseconds) a reader can see the stale
// record as current only if every newer version was removed by hand.
//
// Acquire: if the current record's holder holds the lease (see below),
// ErrHeld. Otherwise, before taking over, it asks the kernel for live
// tenure sockets of this lock file's path (/proc/net/unix) whose token is
// above every token the record knows: a holder whose record files were
// removed, or whose directory was replaced by another at the same path. If
// one lasts 20 ms (an acquisition in flight listens a moment before it
// links), and its acquisition's version N is not one that exists intact
// or existed already (that acquisition lost its race), it is recorded as
// an unknown holder, with an expiry of its TTL from now, and the lease is
// held: it frees when its socket closes or its TTL passes. Otherwise the
// new tenure takes the next token, listens on its socket, links its record,
// and confirms.
//
// Renew and Release: unless the current record names the caller's token
// and holder (and, for Renew, an unexpired lease), and the directory is
// the one the tenure was recorded in, change nothing and return ErrLost.
// Release links a free record (holder "", token kept) before closing the
// tenure socket, so a watcher woken by the socket reads "released".
//
// # Who holds the lease
//
// The current record's holder holds the lease unless the record is free,
// belongs to an earlier boot, its expiry has passed, or its tenure is dead.
// Only the kernel's word counts as death: a connection to the tenure
// socket refused (the abstract name is unbound only when the socket
// closes: the death of the holder's process, however it died, or the end
// of its tenure). A missing or replaced file, directory or record is no
// evidence: it falls back to the TTL. Abstract names belong to a network
// namespace: a holder recorded in another namespace (the record's netns)
// cannot be seen, so its lease lasts until its expiry.
//
// A holder learns at once, from inotify, that its tenure is over
// (Backend.WatchTenure, which lease.Elector uses): when the directory is
// moved, removed or replaced, when its record files are removed, or when
// the current record is another tenure's; not at its next renewal. It
// reports the loss, and its tenure socket closes when it then hands the
// lease back, so that no successor is elected before that report. An
// acquisition whose directory was moved or replaced between its read and
// its commit does not stand: it hands its tenure back and is made again at
// the path (a process that read the path before the move would otherwise
// lead in the moved directory beside a leader at the path).
//
// # Tokens
//
// A new tenure's token is one above every token known (the current
// record's, and live tenure sockets' of this path) and at least the wall
// clock in microseconds since 1970. The floor keeps tokens growing when
// every record is gone: removed by hand, a directory replaced, a reboot
// with the directory on tmpfs (/run, /dev/shm). It assumes that the wall
// clock is not set back, across the loss, to before the last token was
// issued; tokens issued one after another otherwise stay at or below the
// clock, since no two acquisitions happen within a microsecond.
//
// When the clock is behind the tokens (it was set back), a token above it
// is used only after a reservation reaching one second beyond it has been
// written and fsynced; when the record may have lost writes (a machine
// crash: records are not fsynced; the record gone or damaged; an earlier
// boot's record), the next token is also above the reservation. So tokens
// only grow across crashes too, whether the clock or the reservation
// covers them.
//
// # Durability
//
// Only reservations are fsynced, and only when a token runs ahead of the
// clock. Records are not: a record means nothing after a reboot (its boot
// id marks it expired), and within a boot every process reads the page
// cache. A machine crash may leave record files missing or damaged; the
// next operation skips the damaged ones and the token rules above keep
// tokens growing. So no operation pays for an fsync.
//
// # What it assumes of the directory
//
//   - Only participants write it (they may run as different users, or as
//     root). Anyone who can write it can remove the records; that ends the
//     current tenure at once (the holder steps down) and costs no second
//     holder, but such a writer can always stop the lease from working.
//   - It is on a local file system: Open refuses NFS, SMB/CIFS, 9P and
//     FUSE. Over NFS, link and rename are atomic on the server but clients
//     cache attributes and directory listings and may read a stale record,
//     inotify does not see other clients' changes, a unix socket cannot be
//     reached from another machine (so a remote holder would look unknown
//     forever, or a local one dead to it), and monotonic clocks and boot
//     ids differ between machines. Between machines, use a store built for
//     it (lease/etcd, lease/redis, lease/postgres, or coord's Raft cluster).
//   - Every participant reaches it by the same path (symbolic links are
//     resolved): the tenure sockets' names hash the path. Two different
//     directories at one path in different mount namespaces that share a
//     network namespace wait for each other's unrecorded tenures (a delay,
//     never a second holder).
//   - Participants run the same version of this package: the previous
//     version's files (a .NAME.guard lock, socket files) mean nothing here,
//     and it does not understand these.
//
// # When the assumptions break
//
//   - A tenure socket file removed: there is none (abstract namespace).
//   - Record files removed, or the whole directory swapped (mv dir dir.old;
//     mkdir dir): the holder steps down at once; contenders find its live
//     tenure socket in the kernel's table, record it as an unknown holder,
//     and take over when it closes (or at its TTL, if the holder is
//     stopped); tokens stay above its token and the wall clock.
//   - The lock file emptied, garbled or removed: nothing changes; the next
//     operation rewrites it and logs the repair.
//   - A record file damaged: skipped and removed by the next commit; if it
//     was the current holder's, that holder steps down, and nobody takes
//     over before its socket closes or its TTL passes.
//   - A lock file this process may not replace (another user's, in a
//     sticky directory; immutable; a read-only file system) or a record it
//     may not read: an error wrapping lease.ErrUnrepairable that names the
//     file and the reason. An acquisition made before the lock file failed
//     is handed back; a leader's renewal fails, so it steps down; an
//     Elector gives up after three such attempts and its Run returns the
//     error (coord elect and coord run exit 1).
//   - A process stopped anywhere, for any time: nobody waits on it, except
//     that a holder stopped holds its lease until its TTL passes (its
//     socket still accepts connections), and a contender stopped between
//     listening and linking its first record in a directory with no
//     records is taken for a holder without a record: one TTL.
//
// # Limits and caveats
//
// A tenure belongs to the Backend that acquired it: closing that Backend,
// or the death of its process, ends the tenure at once for everyone else.
//
// The clock is CLOCK_MONOTONIC, which stops while the machine is suspended;
// every lease on the machine pauses with it, holders' deadlines included.
//
// What it does not guarantee: a leader that is paused after checking its
// lease and before acting can act after its lease has passed to another.
// Pass the fencing token to the resource it writes to; see package lease.
package file

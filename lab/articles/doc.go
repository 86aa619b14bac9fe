// Package articles re-implements, faithfully and bugs included, the lock
// file programs of the Coordination series' Part 2 ("Processes on One
// Machine"), so that the lab and `coord bench` can run them as real
// processes beside coord's own lease and measure both in the same run.
//
// Nothing here should be used to coordinate anything. The point is to
// reproduce the failures the articles found:
//
//   - StatCreate: stat, then create. Two steps with a gap between them, so
//     two processes launched together can both become leader (the articles
//     saw 3 trials in 30 with two leaders).
//   - Exclusive: open with O_CREATE|O_EXCL, one atomic step. Exactly one
//     leader, but the lock file outlives a dead holder forever.
//   - Lease: the articles' lease program. A JSON record {processId,
//     leaseUntil} with LEASE_DURATION 9 s, RENEW_INTERVAL 3 s and
//     WATCH_INTERVAL 3 s, and with every bug the articles describe or show:
//     leaseUntil is whole Unix seconds and the expiry test is the strict
//     `leaseUntil < now.Unix()`, so a lease expiring in the second it is
//     checked waits another tick (a measured 9.53 s gap after kill -9);
//     acquisition is create-then-write, two steps, so a zero-byte file
//     (a crash between them, or `touch`) wedges every watcher forever;
//     takeover is remove-then-create; renew rewrites the file in place
//     (truncate, then write) without checking who holds the lease, so a
//     paused leader that wakes up overwrites its successor's lease; and the
//     graceful SIGTERM handler removes the lock file without checking
//     either.
//
// The articles' random crash simulation (a kill between 15 and 29 s) is left
// out: the articles commented it out for every measurement.
//
// # Driving the programs
//
// `coord articles` runs them as processes (a hidden command):
//
//	coord articles stat-create PATH [--at TIME] [--hold D] [--json]
//	coord articles exclusive   PATH [--at TIME] [--hold D] [--json]
//	coord articles lease       PATH [--lease 9s] [--renew 3s] [--watch 3s] [--json]
//
// --at (RFC 3339 with nanoseconds) makes every process of a trial check the
// lock file at the same instant; --hold keeps a one-shot program alive after
// it has decided (default: exit at once). The lease program runs until
// SIGTERM or SIGINT, which run the articles' graceful shutdown.
//
// Without --json, the programs print the articles' lines on stdout:
//
//	2024-05-11T21:14:41+02:00 [Process: 60217] [LEADER] Lease renewed, valid until 21:14:50
//
// With --json, those lines go to stderr and stdout carries one lease.Event
// per line, in the same format as `coord elect --json`, so that one parser
// measures both: time, mono_ns (CLOCK_MONOTONIC, comparable between
// processes), event, holder (a process id, as the lock file records it),
// id and pid (the writer's process id), expiry (leaseUntil, whole seconds)
// and detail. There are no fencing tokens, so token is absent. Events:
//
//	elected      this process became leader (detail "acquired" or "takeover")
//	renewed      it renewed (blindly)
//	leader       it saw a new holder (only when the holder changes)
//	expired      it saw an expired lease and is attempting takeover
//	lost-race    its takeover's create failed: another process won
//	unreadable   it could not read or parse the lock file (the wedge)
//	not-elected  a one-shot program that did not become leader
//	released     the leader removed the lock file on SIGTERM/SIGINT
package articles

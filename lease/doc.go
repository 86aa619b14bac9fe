// Package lease elects one leader among many contenders through a lease: a
// lock that expires unless its holder keeps renewing it.
//
// A Backend stores lease records and changes them only by atomic
// compare-and-swap. The store is swappable: a lock file on one machine
// (lease/file), an embedded or remote database, Redis, etcd, or coord's own
// Raft cluster. Backends register a URL scheme (Register) and are opened by
// URL (Open).
//
// Every acquisition issues a fencing token greater than any before it for
// the same name. A lease alone cannot stop a holder that was paused (a GC
// pause, SIGSTOP, a slow disk) from acting after its lease has passed to
// someone else; a resource that remembers the highest token it has seen and
// rejects lower ones can (Kleppmann, "How to do distributed locking").
package lease

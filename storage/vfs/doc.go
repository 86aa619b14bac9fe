// Package vfs is the file system seam of coord's storage: every byte the
// write-ahead log, the snapshot files and the durable Raft storage read or
// write goes through the small FS interface defined here, so that tests can
// swap the disk for one that breaks on purpose.
//
// Three implementations:
//
//   - OS is the real file system (package os).
//   - MemFS is an in-memory file system that models what a crash keeps. A
//     file's data survives a crash only up to its last File.Sync, and a
//     directory entry (a Create, Rename, Remove or MkdirAll) only up to the
//     last SyncDir of its directory. Crash drops everything else; CrashTorn
//     keeps a random part of it (a prefix of each file's unsynced writes,
//     possibly followed by zeros, and for each directory either its synced
//     or its current entries), which is what a journaling file system in
//     ordered mode can leave behind. A crash point (SetCrashPoint) makes the
//     n-th mutating operation the last one the "process" performs, so a test
//     can enumerate every step of a protocol.
//   - FaultFS wraps any FS and injects faults chosen by an Injector: errors
//     on any operation, short writes, and bit flips on write or read, at
//     chosen operations or with a seeded probability.
//
// The durability contract the storage packages rely on, and which MemFS
// enforces, is POSIX's: File.Sync makes a file's data durable but not its
// name; SyncDir makes the names in a directory durable. Creating a file
// durably therefore takes Create, Write, Sync, then SyncDir of its
// directory; replacing one atomically takes a temporary file, Sync, Rename,
// then SyncDir.
//
// Files open for appending (FS.Create, FS.OpenAppend) write at their end;
// WriteAtFile (FS.CreateWriteAt, FS.OpenWriteAt) writes at chosen offsets
// into space allocated ahead (Allocate: fallocate(2) on Linux) and syncs
// with SyncData (fdatasync(2)), which is how the write-ahead log keeps a
// segment's size fixed so that a sync journals no size change. MemFS keeps
// an allocated tail as a size, not as bytes, and a torn crash keeps the
// allocated size while the writes into it reach the disk only in part.
//
// Names are slash-separated paths as used by path/filepath on Unix.
package vfs

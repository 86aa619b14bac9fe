// Package storagetest is the conformance suite for node.Storage, a
// raft.Storage with the write side a node needs: every implementation runs
// it,
//
//	func TestConformance(t *testing.T) {
//		storagetest.Run(t, func(t *testing.T) storagetest.Storage { return NewMemoryStorage() })
//	}
//
// The suite checks the read contract of raft.Storage (index ranges, the
// errors ErrCompacted, ErrUnavailable and ErrSnapshotOutOfDate, the
// maxBytes limit of Entries), the write contract (conflict truncation,
// snapshots installed and created), and, with a seeded random workload,
// that every read agrees with a reference model after every write.
//
// RunCrash checks what survives a crash, given a way to crash the storage
// (a durable one on a file system that loses unsynced writes, vfs.MemFS):
// synced writes survive; a commit index saved without sync may be lost,
// while a term, a vote or an entry may not. Thorough crash testing at
// every write of a seeded workload is the durable implementation's own
// (see storage/raftstore).
package storagetest

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
// Durability across a crash is not something an interface can test
// generically; a durable implementation tests it against a crashable file
// system (see storage/raftstore).
package storagetest

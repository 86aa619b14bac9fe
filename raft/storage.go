package raft

import "errors"

// Errors returned by Storage implementations.
var (
	// ErrCompacted means the requested index precedes the first index
	// available: it was compacted into a snapshot.
	ErrCompacted = errors.New("raft: requested index is compacted")
	// ErrUnavailable means the requested index is beyond the last index.
	ErrUnavailable = errors.New("raft: requested entry is unavailable")
	// ErrSnapshotOutOfDate means a snapshot older than the current one was
	// offered.
	ErrSnapshotOutOfDate = errors.New("raft: snapshot is out of date")
)

// Storage is the consensus core's read access to the durable log. The core
// never writes to it: the caller persists what a Ready asks for (hard state,
// entries, snapshot) into its Storage before calling Advance, and the core
// reads back through this interface.
//
// Indexes: the snapshot covers everything up to and including
// Snapshot().Metadata.Index; FirstIndex is the index after it; LastIndex is
// the index of the last entry (FirstIndex-1 when there are no entries).
//
// Implementations need not be safe for concurrent use unless they say so;
// the node shell calls them from one goroutine.
type Storage interface {
	// InitialState returns the saved HardState and the ConfState of the
	// latest snapshot (or of the initial configuration).
	InitialState() (HardState, ConfState, error)

	// Entries returns the entries in [lo, hi). If maxBytes is not 0, the
	// total size of Data in the result is limited to maxBytes, but at least
	// one entry is returned when lo < hi. ErrCompacted if lo < FirstIndex();
	// ErrUnavailable if hi > LastIndex()+1.
	Entries(lo, hi, maxBytes uint64) ([]Entry, error)

	// Term returns the term of entry i, for i in [FirstIndex()-1,
	// LastIndex()]; the term of FirstIndex()-1 comes from the snapshot
	// metadata. ErrCompacted below that range, ErrUnavailable above it.
	Term(i uint64) (uint64, error)

	// FirstIndex returns the index of the first entry that may be read
	// through Entries.
	FirstIndex() (uint64, error)

	// LastIndex returns the index of the last entry in the log.
	LastIndex() (uint64, error)

	// Snapshot returns the most recent snapshot. The core asks for it when a
	// follower needs entries that were compacted.
	Snapshot() (Snapshot, error)
}

// ErrSnapshotTemporarilyUnavailable means the storage cannot produce a
// snapshot right now (one is being written, say); the core retries later.
var ErrSnapshotTemporarilyUnavailable = errors.New("raft: snapshot is temporarily unavailable")

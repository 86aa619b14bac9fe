package raft

import (
	"bytes"
	"io"
)

// EntryType says how to interpret an Entry's Data.
type EntryType uint8

const (
	// EntryNormal carries an application command (or nothing: a new leader
	// appends an empty entry of its term, Raft §5.4.2 and §8).
	EntryNormal EntryType = iota
	// EntryConfChange carries an encoded membership change.
	EntryConfChange
)

// String returns the entry type's name.
func (t EntryType) String() string {
	switch t {
	case EntryNormal:
		return "normal"
	case EntryConfChange:
		return "confchange"
	default:
		return "unknown"
	}
}

// Entry is one record of the replicated log (Raft Figure 2: log[]).
type Entry struct {
	Term  uint64
	Index uint64
	Type  EntryType
	Data  []byte
}

// HardState is the part of a node's state that must be on stable storage
// before the node sends any message that depends on it (Raft Figure 2:
// currentTerm and votedFor). Commit is saved too, so that a restarted node
// can apply committed entries without waiting for the leader.
type HardState struct {
	Term   uint64
	Vote   uint64 // the candidate voted for in Term; 0 if none
	Commit uint64
}

// IsEmpty reports whether hs is the zero HardState.
func (hs HardState) IsEmpty() bool { return hs == HardState{} }

// ConfState is the cluster membership in force at some log index.
type ConfState struct {
	// Voters count towards quorums for elections and commitment.
	Voters []uint64
	// Learners receive the log but do not vote (dissertation §4.2.1).
	Learners []uint64
	// VotersOutgoing is the old voter set during a joint consensus change
	// (dissertation §4.3); empty otherwise.
	VotersOutgoing []uint64
}

// SnapshotMetadata identifies the last entry a snapshot replaces, and the
// membership at that point (Raft §7).
type SnapshotMetadata struct {
	Index     uint64
	Term      uint64
	ConfState ConfState
}

// Snapshot is the application's state machine as of Metadata.Index, with
// the metadata needed to resume the log after it.
//
// The state is either in Data (a snapshot held in memory: MemoryStorage,
// the simulator's tests) or, when Source is set, behind Source (a file:
// the leader's snapshot file, a follower's spooled copy of one), so that a
// snapshot of any size passes through the core and the node without being
// read into memory. The core never reads either; it only passes the
// Snapshot along. Readers use Size and Open, which work for both.
type Snapshot struct {
	Metadata SnapshotMetadata
	Data     []byte
	// Source, if set, holds the data instead of Data.
	Source SnapshotSource
}

// SnapshotSource is where a snapshot's data is, when it is not in memory.
// Implementations say whether Open may be called more than once (the
// raftstore's files allow it) and from which goroutines.
type SnapshotSource interface {
	// Size returns the data's length in bytes.
	Size() int64
	// Open returns a reader of the data, exactly Size bytes long. A
	// reader of damaged data returns an error instead of its end.
	Open() (io.ReadCloser, error)
}

// Size returns the length of the snapshot's data.
func (s Snapshot) Size() int64 {
	if s.Source != nil {
		return s.Source.Size()
	}
	return int64(len(s.Data))
}

// Open returns a reader of the snapshot's data, from Source if set, else
// from Data.
func (s Snapshot) Open() (io.ReadCloser, error) {
	if s.Source != nil {
		return s.Source.Open()
	}
	return io.NopCloser(bytes.NewReader(s.Data)), nil
}

// IsEmpty reports whether s holds no snapshot.
func (s Snapshot) IsEmpty() bool { return s.Metadata.Index == 0 }

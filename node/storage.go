package node

import "coord/raft"

// Storage is the core's read interface plus the writes the Ready contract
// needs. The node calls it from its loop goroutine only.
type Storage interface {
	raft.Storage
	// Save appends entries (replacing any stored entries at the same or
	// later indexes) and records hs if it is not empty. Both must be
	// durable when Save returns.
	Save(hs raft.HardState, entries []raft.Entry) error
	// ApplySnapshot replaces the log with a snapshot from the leader,
	// durably.
	ApplySnapshot(snap raft.Snapshot) error
	// Compact stores the state machine's snapshot data as of applied index
	// index, with the membership at that index, and discards the log up
	// to it.
	Compact(index uint64, data []byte, cs raft.ConfState) error
}

// MemoryStorage is a Storage held in memory, over raft.MemoryStorage. It
// forgets everything when the process exits; tests use it.
//
// MemoryStorage is not safe for concurrent use; a Node uses it from its
// loop goroutine.
type MemoryStorage struct {
	*raft.MemoryStorage
}

var _ Storage = MemoryStorage{}

// NewMemoryStorage returns an empty MemoryStorage.
func NewMemoryStorage() MemoryStorage { return MemoryStorage{raft.NewMemoryStorage()} }

// Save implements Storage.
func (m MemoryStorage) Save(hs raft.HardState, entries []raft.Entry) error {
	if !hs.IsEmpty() {
		if err := m.SetHardState(hs); err != nil {
			return err
		}
	}
	return m.Append(entries)
}

// Compact implements Storage.
func (m MemoryStorage) Compact(index uint64, data []byte, cs raft.ConfState) error {
	if _, err := m.CreateSnapshot(index, cs, data); err != nil {
		return err
	}
	return m.MemoryStorage.Compact(index)
}

package node

import "coord/raft"

// Storage is the core's read interface plus the writes the Ready contract
// needs. The node calls it from its loop goroutine only. Every
// implementation runs the conformance suite, storage/storagetest.
type Storage interface {
	raft.Storage
	// Save stores hs, unless it is empty, and appends entries. Entries
	// from entries[0].Index on are replaced (Raft's conflict truncation).
	// entries must be contiguous and entries[0].Index at most
	// LastIndex()+1; entries at or below the snapshot's index are ignored.
	//
	// With sync, both must be durable when Save returns. Without it (the
	// Ready's MustSync is false: hs changes the commit index alone), Save
	// may return before hs is durable, and a crash may lose it: recovery
	// then finds an earlier hard state, and the commit index is learnt
	// again from the leader. Only the commit index may be lost so: entries
	// and a change of term or vote must be durable on return whatever
	// sync says (a lost vote could be cast twice, Raft Figure 2), and a
	// later Save with sync makes the earlier ones durable too.
	Save(hs raft.HardState, entries []raft.Entry, sync bool) error
	// ApplySnapshot installs snap (one received from the leader), durably:
	// the whole log is replaced by it, so that FirstIndex() is snap's index
	// + 1 and LastIndex() its index. ErrSnapshotOutOfDate (raft) if snap is
	// not newer than the current snapshot. It may raise the hard state's
	// Commit to snap's index (a snapshot holds only committed entries).
	ApplySnapshot(snap raft.Snapshot) error
	// Compact stores the state machine's snapshot data as of applied index
	// index, with the membership cs at that index, and discards the log up
	// to it. ErrSnapshotOutOfDate (raft) if index is not above the current
	// snapshot's index; ErrUnavailable (raft) if it is above LastIndex().
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

// Save implements Storage. Memory is as durable as the process, so sync
// changes nothing.
func (m MemoryStorage) Save(hs raft.HardState, entries []raft.Entry, _ bool) error {
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

package raft

import (
	"fmt"
	"slices"

	"coord/internal/assert"
)

// MemoryStorage is a Storage held in memory, for tests and the simulator.
// Whatever has been written to it counts as persisted: a simulated crash
// keeps the MemoryStorage and drops the Core, which is exactly "only what
// the Ready contract persisted survives".
//
// MemoryStorage is not safe for concurrent use; the node shell and the
// simulator use it from one goroutine.
type MemoryStorage struct {
	hardState HardState
	snapshot  Snapshot
	// entries[0] is a placeholder for the entry at the snapshot's index,
	// carrying its term; the real entries follow.
	entries []Entry
}

var _ Storage = (*MemoryStorage)(nil)

// NewMemoryStorage returns an empty storage.
func NewMemoryStorage() *MemoryStorage {
	return &MemoryStorage{entries: make([]Entry, 1)}
}

// InitialState implements Storage.
func (ms *MemoryStorage) InitialState() (HardState, ConfState, error) {
	return ms.hardState, ms.snapshot.Metadata.ConfState, nil
}

// HardState returns the saved hard state.
func (ms *MemoryStorage) HardState() HardState { return ms.hardState }

// SetHardState saves the hard state.
func (ms *MemoryStorage) SetHardState(hs HardState) error {
	ms.hardState = hs
	return nil
}

func (ms *MemoryStorage) offset() uint64 { return ms.entries[0].Index }

// Entries implements Storage.
func (ms *MemoryStorage) Entries(lo, hi, maxBytes uint64) ([]Entry, error) {
	if lo <= ms.offset() {
		return nil, ErrCompacted
	}
	last, _ := ms.LastIndex()
	if hi > last+1 {
		return nil, fmt.Errorf("%w: entries [%d, %d) past last index %d", ErrUnavailable, lo, hi, last)
	}
	if lo >= hi {
		return nil, nil
	}
	// The caller owns the result and may append to it: cap the slice so an
	// append copies instead of overwriting the entries after hi.
	a, b := lo-ms.offset(), hi-ms.offset()
	return limitSize(ms.entries[a:b:b], maxBytes), nil
}

// Term implements Storage.
func (ms *MemoryStorage) Term(i uint64) (uint64, error) {
	if i < ms.offset() {
		return 0, ErrCompacted
	}
	if i-ms.offset() >= uint64(len(ms.entries)) {
		return 0, ErrUnavailable
	}
	return ms.entries[i-ms.offset()].Term, nil
}

// FirstIndex implements Storage.
func (ms *MemoryStorage) FirstIndex() (uint64, error) { return ms.offset() + 1, nil }

// LastIndex implements Storage.
func (ms *MemoryStorage) LastIndex() (uint64, error) {
	return ms.offset() + uint64(len(ms.entries)) - 1, nil
}

// Snapshot implements Storage.
func (ms *MemoryStorage) Snapshot() (Snapshot, error) { return ms.snapshot, nil }

// ApplySnapshot replaces the storage's contents with a snapshot received
// from the leader. ErrSnapshotOutOfDate if it is older than the current one.
func (ms *MemoryStorage) ApplySnapshot(s Snapshot) error {
	if s.Metadata.Index <= ms.snapshot.Metadata.Index {
		return ErrSnapshotOutOfDate
	}
	ms.snapshot = s
	ms.entries = []Entry{{Term: s.Metadata.Term, Index: s.Metadata.Index}}
	return nil
}

// CreateSnapshot records the application's snapshot data as of applied
// index i, with the membership at i. It does not compact; call Compact.
func (ms *MemoryStorage) CreateSnapshot(i uint64, cs ConfState, data []byte) (Snapshot, error) {
	if i <= ms.snapshot.Metadata.Index {
		return Snapshot{}, ErrSnapshotOutOfDate
	}
	last, _ := ms.LastIndex()
	if i > last {
		return Snapshot{}, fmt.Errorf("%w: snapshot index %d past last index %d", ErrUnavailable, i, last)
	}
	ms.snapshot = Snapshot{
		Metadata: SnapshotMetadata{Index: i, Term: ms.entries[i-ms.offset()].Term, ConfState: cs},
		Data:     slices.Clone(data),
	}
	return ms.snapshot, nil
}

// Compact discards the entries up to and including i, which a snapshot
// must already cover. ErrCompacted if i was already compacted.
func (ms *MemoryStorage) Compact(i uint64) error {
	if i <= ms.offset() {
		return ErrCompacted
	}
	last, _ := ms.LastIndex()
	if i > last {
		return fmt.Errorf("%w: compact %d past last index %d", ErrUnavailable, i, last)
	}
	if i > ms.snapshot.Metadata.Index {
		return fmt.Errorf("raft: compact %d past snapshot index %d", i, ms.snapshot.Metadata.Index)
	}
	kept := ms.entries[i-ms.offset():]
	entries := make([]Entry, 1, len(kept))
	entries[0] = Entry{Index: kept[0].Index, Term: kept[0].Term}
	ms.entries = append(entries, kept[1:]...)
	return nil
}

// Append adds entries, replacing any stored entries at the same or later
// indexes (the Ready contract). Entries already compacted are skipped.
func (ms *MemoryStorage) Append(entries []Entry) error {
	if len(entries) == 0 {
		return nil
	}
	first := ms.offset() + 1
	if last := entries[len(entries)-1].Index; last < first {
		return nil
	}
	if entries[0].Index < first {
		entries = entries[first-entries[0].Index:]
	}
	at := entries[0].Index - ms.offset()
	if at > uint64(len(ms.entries)) {
		assert.Fail("append at %d leaves a gap after last index %d", entries[0].Index, ms.offset()+uint64(len(ms.entries))-1)
	}
	if at == uint64(len(ms.entries)) {
		ms.entries = append(ms.entries, entries...)
		return nil
	}
	// Replace a suffix in a fresh array: slices handed out by Entries (in
	// messages still in flight, say) must not change under their holders.
	ms.entries = append(slices.Clone(ms.entries[:at]), entries...)
	return nil
}

package raft

import "coord/internal/assert"

// unstable holds the entries (and possibly a snapshot) that the core has
// accepted but the caller has not yet confirmed as persisted. Entry i is at
// entries[i-offset]. A snapshot, when present, precedes the entries.
type unstable struct {
	snapshot *Snapshot
	entries  []Entry
	offset   uint64
}

// maybeFirstIndex returns the first log index if the unstable part knows it
// (only when it holds a snapshot).
func (u *unstable) maybeFirstIndex() (uint64, bool) {
	if u.snapshot != nil {
		return u.snapshot.Metadata.Index + 1, true
	}
	return 0, false
}

// maybeLastIndex returns the last log index if the unstable part holds any
// entry or a snapshot.
func (u *unstable) maybeLastIndex() (uint64, bool) {
	if n := len(u.entries); n != 0 {
		return u.offset + uint64(n) - 1, true
	}
	if u.snapshot != nil {
		return u.snapshot.Metadata.Index, true
	}
	return 0, false
}

// maybeTerm returns the term of entry i if the unstable part knows it.
func (u *unstable) maybeTerm(i uint64) (uint64, bool) {
	if i < u.offset {
		if u.snapshot != nil && u.snapshot.Metadata.Index == i {
			return u.snapshot.Metadata.Term, true
		}
		return 0, false
	}
	last, ok := u.maybeLastIndex()
	if !ok || i > last {
		return 0, false
	}
	return u.entries[i-u.offset].Term, true
}

// stableTo marks the entries up to i (of term t) as persisted. It does
// nothing if entry i was replaced in the meantime.
func (u *unstable) stableTo(i, t uint64) {
	gt, ok := u.maybeTerm(i)
	if !ok || gt != t || i < u.offset {
		return
	}
	u.entries = u.entries[i+1-u.offset:]
	u.offset = i + 1
	if len(u.entries) == 0 {
		u.entries = nil // let the backing array go
	}
}

// stableSnapTo marks the snapshot at index i as persisted.
func (u *unstable) stableSnapTo(i uint64) {
	if u.snapshot != nil && u.snapshot.Metadata.Index == i {
		u.snapshot = nil
	}
}

// restore replaces everything with a snapshot.
func (u *unstable) restore(s Snapshot) {
	u.offset = s.Metadata.Index + 1
	u.entries = nil
	u.snapshot = &s
}

// truncateAndAppend appends entries, first dropping any unstable entry at or
// after the first new index (a conflict resolved in the leader's favour,
// Raft §5.3).
func (u *unstable) truncateAndAppend(entries []Entry) {
	after := entries[0].Index
	switch {
	case after == u.offset+uint64(len(u.entries)):
		u.entries = append(u.entries, entries...)
	case after <= u.offset:
		// Everything unstable is replaced; the caller's storage will
		// truncate its own suffix when these entries are persisted.
		u.offset = after
		u.entries = append([]Entry(nil), entries...)
	default:
		kept := u.entries[:after-u.offset]
		u.entries = append(append(make([]Entry, 0, len(kept)+len(entries)), kept...), entries...)
	}
}

// slice returns the unstable entries in [lo, hi).
func (u *unstable) slice(lo, hi uint64) []Entry {
	upper := u.offset + uint64(len(u.entries))
	if !(u.offset <= lo && lo <= hi && hi <= upper) {
		assert.Fail("unstable slice [%d, %d) out of bounds [%d, %d)", lo, hi, u.offset, upper)
	}
	return u.entries[lo-u.offset : hi-u.offset]
}

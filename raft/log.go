package raft

import (
	"errors"

	"coord/internal/assert"
)

// raftLog is the core's view of the replicated log: the persisted part read
// through Storage, followed by the unstable part not yet persisted.
//
//	snapshot | storage entries ... | unstable entries ...
//	         ^ firstIndex                             ^ lastIndex
//
// committed is the highest index known to be stored on a quorum (Figure 2:
// commitIndex); applied is the highest index handed to the application
// (lastApplied). applied <= committed <= lastIndex always.
type raftLog struct {
	storage   Storage
	unstable  unstable
	committed uint64
	applied   uint64
	// applying is the highest index handed out in a Ready but not yet
	// confirmed by Advance.
	applying uint64
	// maxApplyingSize bounds the bytes of committed entries in one Ready.
	maxApplyingSize uint64
}

func newLog(storage Storage, maxApplyingSize uint64) (*raftLog, error) {
	first, err := storage.FirstIndex()
	if err != nil {
		return nil, err
	}
	last, err := storage.LastIndex()
	if err != nil {
		return nil, err
	}
	l := &raftLog{storage: storage, maxApplyingSize: maxApplyingSize}
	l.unstable.offset = last + 1
	l.committed = first - 1
	l.applied = first - 1
	l.applying = first - 1
	return l, nil
}

func (l *raftLog) firstIndex() uint64 {
	if i, ok := l.unstable.maybeFirstIndex(); ok {
		return i
	}
	i, err := l.storage.FirstIndex()
	assert.NoError(err, "storage FirstIndex")
	return i
}

func (l *raftLog) lastIndex() uint64 {
	if i, ok := l.unstable.maybeLastIndex(); ok {
		return i
	}
	i, err := l.storage.LastIndex()
	assert.NoError(err, "storage LastIndex")
	return i
}

// lastStableIndex returns the last index the caller confirmed as
// persisted (Advance); 0 while a snapshot waits to be persisted.
func (l *raftLog) lastStableIndex() uint64 {
	switch {
	case l.unstable.snapshot != nil:
		return 0
	case len(l.unstable.entries) > 0:
		return l.unstable.offset - 1
	}
	return l.lastIndex()
}

func (l *raftLog) lastTerm() uint64 {
	t, err := l.term(l.lastIndex())
	assert.NoError(err, "term of the last index")
	return t
}

// term returns the term of entry i. The entry before firstIndex is known
// from the snapshot. ErrCompacted below that, ErrUnavailable past the end.
func (l *raftLog) term(i uint64) (uint64, error) {
	if t, ok := l.unstable.maybeTerm(i); ok {
		return t, nil
	}
	if i+1 < l.firstIndex() {
		return 0, ErrCompacted
	}
	if i > l.lastIndex() {
		return 0, ErrUnavailable
	}
	t, err := l.storage.Term(i)
	if err != nil && !errors.Is(err, ErrCompacted) && !errors.Is(err, ErrUnavailable) {
		assert.NoError(err, "storage Term")
	}
	return t, err
}

// termOrZero returns the term of entry i, or 0 if it is not in the log.
func (l *raftLog) termOrZero(i uint64) uint64 {
	t, err := l.term(i)
	if err != nil {
		return 0
	}
	return t
}

func (l *raftLog) matchTerm(i, t uint64) bool {
	got, err := l.term(i)
	return err == nil && got == t
}

// isUpToDate reports whether a log ending at (lastIndex, lastTerm) is at
// least as up-to-date as ours (Raft §5.4.1): a later last term wins, and
// with equal last terms the longer log wins.
func (l *raftLog) isUpToDate(lastIndex, lastTerm uint64) bool {
	ourTerm := l.lastTerm()
	return lastTerm > ourTerm || (lastTerm == ourTerm && lastIndex >= l.lastIndex())
}

// findConflict returns the index of the first entry whose term differs from
// ours (or which we do not have); 0 if all of them match.
func (l *raftLog) findConflict(entries []Entry) uint64 {
	for _, e := range entries {
		if !l.matchTerm(e.Index, e.Term) {
			return e.Index
		}
	}
	return 0
}

// findConflictByTerm returns the largest index at or below index whose term
// is at most term, and that term. A follower that rejects an append uses it
// to hint the leader past a whole run of conflicting entries at once; the
// leader uses it on the hint to skip its own. (The extended paper's §5.3
// optimisation, as refined by etcd.)
func (l *raftLog) findConflictByTerm(index, term uint64) (uint64, uint64) {
	for ; index > 0; index-- {
		t, err := l.term(index)
		if err != nil {
			return index, 0
		}
		if t <= term {
			return index, t
		}
	}
	return 0, 0
}

// append adds entries after truncating any conflicting suffix. It never
// touches committed entries (Leader Completeness would be lost).
func (l *raftLog) append(entries ...Entry) {
	if len(entries) == 0 {
		return
	}
	after := entries[0].Index - 1
	if after < l.committed {
		assert.Fail("append after index %d would truncate committed index %d", after, l.committed)
	}
	l.unstable.truncateAndAppend(entries)
}

// commitTo raises the commit index. Commit never decreases.
func (l *raftLog) commitTo(index uint64) {
	if index <= l.committed {
		return
	}
	if index > l.lastIndex() {
		assert.Fail("commit index %d > last index %d", index, l.lastIndex())
	}
	l.committed = index
}

// maybeCommit commits index if it is of the given term: a leader only
// counts replicas for entries of its current term (Raft §5.4.2, Figure 8).
func (l *raftLog) maybeCommit(index, term uint64) bool {
	if index > l.committed && l.termOrZero(index) == term {
		l.commitTo(index)
		return true
	}
	return false
}

func (l *raftLog) appliedTo(i uint64) {
	if i == 0 {
		return
	}
	if !(l.committed >= i && i >= l.applied) {
		assert.Fail("applied %d outside [applied %d, committed %d]", i, l.applied, l.committed)
	}
	l.applied = i
	l.applying = max(l.applying, i)
}

func (l *raftLog) stableTo(i, t uint64)  { l.unstable.stableTo(i, t) }
func (l *raftLog) stableSnapTo(i uint64) { l.unstable.stableSnapTo(i) }

// restore replaces the log with a snapshot (Raft §7, InstallSnapshot step 8).
func (l *raftLog) restore(s Snapshot) {
	l.committed = s.Metadata.Index
	l.applying = max(l.applying, l.applied)
	l.unstable.restore(s)
}

func (l *raftLog) unstableEntries() []Entry {
	if len(l.unstable.entries) == 0 {
		return nil
	}
	return l.unstable.entries
}

func (l *raftLog) pendingSnapshot() *Snapshot { return l.unstable.snapshot }

// hasNextCommittedEntries reports whether there are committed entries not
// yet handed to the application. While a snapshot is pending, entries wait
// for it.
func (l *raftLog) hasNextCommittedEntries() bool {
	if l.unstable.snapshot != nil {
		return false
	}
	lo := max(l.applying, l.applied) + 1
	return lo <= l.committed && lo >= l.firstIndex()
}

// nextCommittedEntries returns committed entries not yet handed out, up to
// maxApplyingSize bytes (at least one).
func (l *raftLog) nextCommittedEntries() []Entry {
	if !l.hasNextCommittedEntries() {
		return nil
	}
	lo := max(l.applying, l.applied) + 1
	entries, err := l.slice(lo, l.committed+1, l.maxApplyingSize)
	assert.NoError(err, "committed entries")
	return entries
}

// entries returns entries from i on, up to maxBytes of data (at least one).
func (l *raftLog) entries(i, maxBytes uint64) ([]Entry, error) {
	if i > l.lastIndex() {
		return nil, nil
	}
	return l.slice(i, l.lastIndex()+1, maxBytes)
}

// slice returns the entries in [lo, hi), up to maxBytes (0: unlimited) but
// at least one entry.
func (l *raftLog) slice(lo, hi, maxBytes uint64) ([]Entry, error) {
	if lo < l.firstIndex() {
		return nil, ErrCompacted
	}
	if !(lo <= hi && hi <= l.lastIndex()+1) {
		assert.Fail("slice [%d, %d) out of bounds, last index %d", lo, hi, l.lastIndex())
	}
	if lo == hi {
		return nil, nil
	}
	var result []Entry
	if lo < l.unstable.offset {
		stored, err := l.storage.Entries(lo, min(hi, l.unstable.offset), maxBytes)
		if errors.Is(err, ErrCompacted) {
			return nil, err
		}
		assert.NoError(err, "storage Entries")
		if uint64(len(stored)) < min(hi, l.unstable.offset)-lo {
			return stored, nil // the size limit was reached
		}
		result = stored
	}
	if hi > l.unstable.offset {
		u := l.unstable.slice(max(lo, l.unstable.offset), hi)
		if len(result) == 0 {
			result = u
		} else {
			result = append(append([]Entry(nil), result...), u...)
		}
	}
	return limitSize(result, maxBytes), nil
}

// limitSize keeps a prefix of entries whose data totals at most maxBytes,
// and always at least one entry. maxBytes 0 means no limit.
func limitSize(entries []Entry, maxBytes uint64) []Entry {
	if len(entries) == 0 || maxBytes == 0 {
		return entries
	}
	size := uint64(len(entries[0].Data))
	n := 1
	for ; n < len(entries); n++ {
		size += uint64(len(entries[n].Data))
		if size > maxBytes {
			break
		}
	}
	return entries[:n:n]
}

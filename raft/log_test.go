package raft

import "testing"

func newTestLog(terms ...uint64) *raftLog {
	ms := NewMemoryStorage()
	_ = ms.Append(entriesOf(terms...))
	l, err := newLog(ms, 0)
	if err != nil {
		panic(err)
	}
	return l
}

func TestFindConflict(t *testing.T) {
	l := newTestLog(1, 2, 3)
	tests := []struct {
		entries []Entry
		want    uint64
	}{
		{nil, 0},
		{[]Entry{{Index: 1, Term: 1}, {Index: 2, Term: 2}}, 0},
		{[]Entry{{Index: 2, Term: 2}, {Index: 3, Term: 3}, {Index: 4, Term: 4}}, 4},
		{[]Entry{{Index: 2, Term: 1}, {Index: 3, Term: 4}}, 2},
	}
	for _, tt := range tests {
		if got := l.findConflict(tt.entries); got != tt.want {
			t.Errorf("findConflict(%v) = %d, want %d", tt.entries, got, tt.want)
		}
	}
}

func TestFindConflictByTerm(t *testing.T) {
	l := newTestLog(1, 1, 2, 2, 5, 5)
	tests := []struct{ index, term, wantIndex, wantTerm uint64 }{
		{6, 5, 6, 5},
		{6, 4, 4, 2},
		{6, 1, 2, 1},
		{6, 0, 0, 0},
		{3, 3, 3, 2},
	}
	for _, tt := range tests {
		i, term := l.findConflictByTerm(tt.index, tt.term)
		if i != tt.wantIndex || term != tt.wantTerm {
			t.Errorf("findConflictByTerm(%d, %d) = %d/%d, want %d/%d", tt.index, tt.term, i, term, tt.wantIndex, tt.wantTerm)
		}
	}
}

// A leader commits only entries of its own term by counting replicas
// (Raft §5.4.2, Figure 8).
func TestMaybeCommitOnlyCurrentTerm(t *testing.T) {
	l := newTestLog(1, 2, 2)
	if l.maybeCommit(3, 3) {
		t.Error("committed index 3 of term 2 while counting for term 3")
	}
	if !l.maybeCommit(3, 2) || l.committed != 3 {
		t.Errorf("did not commit index 3 for term 2; committed = %d", l.committed)
	}
	if l.maybeCommit(2, 2) {
		t.Error("commit went backwards")
	}
}

func TestIsUpToDate(t *testing.T) {
	l := newTestLog(1, 2, 2)
	tests := []struct {
		index, term uint64
		want        bool
	}{
		{3, 2, true}, {2, 2, false}, {1, 3, true}, {9, 1, false}, {4, 2, true},
	}
	for _, tt := range tests {
		if got := l.isUpToDate(tt.index, tt.term); got != tt.want {
			t.Errorf("isUpToDate(%d, %d) = %v, want %v", tt.index, tt.term, got, tt.want)
		}
	}
}

func TestAppendTruncatesUnstableAndRefusesCommitted(t *testing.T) {
	l := newTestLog(1)
	l.append(Entry{Index: 2, Term: 1}, Entry{Index: 3, Term: 1})
	l.append(Entry{Index: 3, Term: 2})
	if got := l.lastIndex(); got != 3 || l.termOrZero(3) != 2 {
		t.Fatalf("after conflicting append: last %d term %d, want 3 and 2", got, l.termOrZero(3))
	}
	l.commitTo(3)
	defer func() {
		if recover() == nil {
			t.Error("truncating a committed entry did not panic")
		}
	}()
	l.append(Entry{Index: 2, Term: 3})
}

func TestLimitSize(t *testing.T) {
	es := []Entry{{Data: make([]byte, 4)}, {Data: make([]byte, 4)}, {Data: make([]byte, 4)}}
	for _, tt := range []struct {
		max  uint64
		want int
	}{{0, 3}, {1, 1}, {8, 2}, {100, 3}} {
		if got := len(limitSize(es, tt.max)); got != tt.want {
			t.Errorf("limitSize(max %d) kept %d, want %d", tt.max, got, tt.want)
		}
	}
}

func TestInflights(t *testing.T) {
	in := newInflights(3, 0)
	in.add(5, 1)
	in.add(7, 1)
	in.add(9, 1)
	if !in.full() {
		t.Fatal("3 of 3 in flight is not full")
	}
	in.freeLE(7)
	if in.count != 1 {
		t.Errorf("after freeLE(7): %d in flight, want 1", in.count)
	}
	in.add(11, 1)
	in.add(12, 1)
	in.freeLE(9)
	if in.count != 2 || in.oldest() != 11 {
		t.Errorf("after freeLE(9): %d in flight from %d, want 2 from 11", in.count, in.oldest())
	}
	in.freeLE(100)
	if in.count != 0 {
		t.Errorf("after freeing all: %d in flight", in.count)
	}
}

// The bytes bound holds sends back once the bytes in flight reach it, but
// never the first append, however large: an entry over the bound still
// goes, alone.
func TestInflightsBoundedInBytes(t *testing.T) {
	in := newInflights(100, 10)
	in.add(1, 25) // one append over the whole bound
	if !in.full() {
		t.Fatal("25 of 10 bytes in flight is not full")
	}
	in.freeLE(1)
	if in.full() || in.bytes != 0 {
		t.Fatalf("after freeing it: full %v, %d bytes", in.full(), in.bytes)
	}
	in.add(2, 4)
	in.add(3, 5)
	if in.full() {
		t.Fatal("9 of 10 bytes in flight is full")
	}
	in.add(4, 1)
	if !in.full() {
		t.Fatal("10 of 10 bytes in flight is not full")
	}
	in.freeLE(2)
	if in.full() || in.bytes != 6 {
		t.Fatalf("after freeing the oldest: full %v, %d bytes, want 6", in.full(), in.bytes)
	}
	in.reset()
	if in.bytes != 0 || in.count != 0 {
		t.Fatalf("after reset: %d appends, %d bytes", in.count, in.bytes)
	}
}

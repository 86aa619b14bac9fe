package raft

import (
	"errors"
	"testing"
)

func entriesOf(terms ...uint64) []Entry {
	var es []Entry
	for i, t := range terms {
		es = append(es, Entry{Index: uint64(i + 1), Term: t})
	}
	return es
}

func TestMemoryStorageAppendTruncatesConflicts(t *testing.T) {
	ms := NewMemoryStorage()
	if err := ms.Append(entriesOf(1, 1, 2, 2)); err != nil {
		t.Fatal(err)
	}
	held, _ := ms.Entries(1, 5, 0)
	if err := ms.Append([]Entry{{Index: 3, Term: 3}}); err != nil {
		t.Fatal(err)
	}
	if last, _ := ms.LastIndex(); last != 3 {
		t.Errorf("last index after truncating append = %d, want 3", last)
	}
	if term, _ := ms.Term(3); term != 3 {
		t.Errorf("term of 3 = %d, want 3", term)
	}
	if held[2].Term != 2 {
		t.Errorf("a slice handed out earlier changed under its holder: %v", held)
	}
}

func TestMemoryStorageBounds(t *testing.T) {
	ms := NewMemoryStorage()
	_ = ms.Append(entriesOf(1, 1, 1, 2, 2))
	if _, err := ms.CreateSnapshot(3, ConfState{Voters: []uint64{1}}, []byte("s")); err != nil {
		t.Fatal(err)
	}
	if err := ms.Compact(3); err != nil {
		t.Fatal(err)
	}
	if first, _ := ms.FirstIndex(); first != 4 {
		t.Errorf("first index = %d, want 4", first)
	}
	if term, err := ms.Term(3); err != nil || term != 1 {
		t.Errorf("Term(3) after compaction = %d, %v; want 1 from the snapshot", term, err)
	}
	checks := []struct {
		name string
		err  error
		want error
	}{
		{"Term below snapshot", second(ms.Term(2)), ErrCompacted},
		{"Term past end", second(ms.Term(6)), ErrUnavailable},
		{"Entries compacted", second(ms.Entries(3, 5, 0)), ErrCompacted},
		{"Entries past end", second(ms.Entries(4, 7, 0)), ErrUnavailable},
		{"Compact again", ms.Compact(3), ErrCompacted},
		{"old snapshot", ms.ApplySnapshot(Snapshot{Metadata: SnapshotMetadata{Index: 2, Term: 1}}), ErrSnapshotOutOfDate},
		{"old CreateSnapshot", second(ms.CreateSnapshot(3, ConfState{}, nil)), ErrSnapshotOutOfDate},
	}
	for _, c := range checks {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	_ = ms.Append([]Entry{{Index: 6, Term: 2, Data: []byte("ab")}, {Index: 7, Term: 2, Data: []byte("cd")}})
	es, err := ms.Entries(6, 8, 1)
	if err != nil || len(es) != 1 {
		t.Errorf("Entries with a 1-byte limit = %v, %v; want exactly one entry", es, err)
	}
}

func second[T any](_ T, err error) error { return err }

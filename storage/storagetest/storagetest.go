package storagetest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"coord/node"
	"coord/raft"
)

// Storage is the interface the suite checks: node.Storage, whose method
// docs are the contract.
type Storage = node.Storage

// Run runs the conformance suite, each test on a new, empty Storage from
// newStorage.
func Run(t *testing.T, newStorage func(t *testing.T) Storage) {
	tests := []struct {
		name string
		test func(t *testing.T, s Storage)
	}{
		{"Empty", testEmpty},
		{"SaveAndRead", testSaveAndRead},
		{"EntriesMaxBytes", testEntriesMaxBytes},
		{"EntriesResultIsCallers", testEntriesResultIsCallers},
		{"ConflictTruncation", testConflictTruncation},
		{"HardState", testHardState},
		{"Compact", testCompact},
		{"CompactErrors", testCompactErrors},
		{"SaveOverlappingSnapshot", testSaveOverlappingSnapshot},
		{"ApplySnapshotPastLog", testApplySnapshotPastLog},
		{"ApplySnapshotInsideLog", testApplySnapshotInsideLog},
		{"ApplySnapshotOutOfDate", testApplySnapshotOutOfDate},
		{"RandomAgainstModel", testRandomAgainstModel},
		{"RepairOfAHealthyStorage", testRepairOfAHealthyStorage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.test(t, newStorage(t)) })
	}
}

// testRepairOfAHealthyStorage: a Storage that can be repaired after a
// failed write (node.Repairer) treats Repair as a no-op while it works:
// nothing acknowledged changes, and writes go on.
func testRepairOfAHealthyStorage(t *testing.T, s Storage) {
	r, ok := s.(node.Repairer)
	if !ok {
		t.Skip("the Storage has no Repair")
	}
	must(t, s.Save(raft.HardState{Term: 2, Vote: 1, Commit: 2}, ents(1, 3, 2), true))
	must(t, r.Repair())
	checkRange(t, s, 1, 3)
	hs, _, err := s.InitialState()
	must(t, err)
	if hs != (raft.HardState{Term: 2, Vote: 1, Commit: 2}) {
		t.Fatalf("after Repair, hard state %+v", hs)
	}
	must(t, s.Save(raft.HardState{}, ents(4, 1, 2), true))
	checkRange(t, s, 1, 4)
}

// ents returns n entries from first with the given term.
func ents(first, n, term uint64) []raft.Entry {
	var out []raft.Entry
	for i := range n {
		out = append(out, raft.Entry{Term: term, Index: first + i, Data: []byte(fmt.Sprintf("%d@%d", first+i, term))})
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func equalEntries(a, b []raft.Entry) bool {
	return slices.EqualFunc(a, b, func(x, y raft.Entry) bool {
		return x.Term == y.Term && x.Index == y.Index && x.Type == y.Type && bytes.Equal(x.Data, y.Data)
	})
}

func indexes(es []raft.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%d/%d", e.Index, e.Term))
	}
	return out
}

// checkRange checks FirstIndex and LastIndex.
func checkRange(t *testing.T, s Storage, first, last uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	must(t, err)
	l, err := s.LastIndex()
	must(t, err)
	if f != first || l != last {
		t.Fatalf("FirstIndex, LastIndex = %d, %d; want %d, %d", f, l, first, last)
	}
}

// checkEntries checks Entries(lo, hi, 0) against want.
func checkEntries(t *testing.T, s Storage, lo, hi uint64, want []raft.Entry) {
	t.Helper()
	got, err := s.Entries(lo, hi, 0)
	must(t, err)
	if !equalEntries(got, want) {
		t.Fatalf("Entries(%d, %d) = %v, want %v", lo, hi, indexes(got), indexes(want))
	}
}

func checkTerm(t *testing.T, s Storage, i, want uint64) {
	t.Helper()
	got, err := s.Term(i)
	if err != nil || got != want {
		t.Fatalf("Term(%d) = %d, %v; want %d", i, got, err, want)
	}
}

func checkErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}

func testEmpty(t *testing.T, s Storage) {
	checkRange(t, s, 1, 0)
	checkTerm(t, s, 0, 0)
	_, err := s.Term(1)
	checkErr(t, "Term(1) of an empty log", err, raft.ErrUnavailable)
	checkEntries(t, s, 1, 1, nil)
	_, err = s.Entries(1, 2, 0)
	checkErr(t, "Entries(1, 2) of an empty log", err, raft.ErrUnavailable)
	hs, cs, err := s.InitialState()
	must(t, err)
	if !hs.IsEmpty() || !cs.Equal(raft.ConfState{}) {
		t.Fatalf("InitialState of a new storage = %+v, %+v", hs, cs)
	}
	snap, err := s.Snapshot()
	must(t, err)
	if !snap.IsEmpty() {
		t.Fatalf("Snapshot of a new storage = %+v", snap.Metadata)
	}
}

func testSaveAndRead(t *testing.T, s Storage) {
	must(t, s.Save(raft.HardState{Term: 2, Vote: 1}, ents(1, 3, 1), true))
	must(t, s.Save(raft.HardState{}, ents(4, 2, 2), true))
	want := append(ents(1, 3, 1), ents(4, 2, 2)...)
	checkRange(t, s, 1, 5)
	checkEntries(t, s, 1, 6, want)
	checkEntries(t, s, 2, 4, want[1:3])
	checkEntries(t, s, 3, 3, nil)
	for _, e := range want {
		checkTerm(t, s, e.Index, e.Term)
	}
	checkTerm(t, s, 0, 0)
	_, err := s.Term(6)
	checkErr(t, "Term(6) past the last index 5", err, raft.ErrUnavailable)
	_, err = s.Entries(4, 7, 0)
	checkErr(t, "Entries(4, 7) past the last index 5", err, raft.ErrUnavailable)

	// Entry types and empty data are kept.
	must(t, s.Save(raft.HardState{}, []raft.Entry{{Term: 2, Index: 6, Type: raft.EntryConfChange, Data: []byte("cc")}, {Term: 2, Index: 7}}, true))
	got, err := s.Entries(6, 8, 0)
	must(t, err)
	if len(got) != 2 || got[0].Type != raft.EntryConfChange || string(got[0].Data) != "cc" || len(got[1].Data) != 0 {
		t.Fatalf("Entries(6, 8) = %+v", got)
	}
	// Saving nothing changes nothing.
	must(t, s.Save(raft.HardState{}, nil, true))
	checkRange(t, s, 1, 7)
}

func testEntriesMaxBytes(t *testing.T, s Storage) {
	var es []raft.Entry
	for i := range uint64(5) {
		es = append(es, raft.Entry{Term: 1, Index: i + 1, Data: bytes.Repeat([]byte{'x'}, 10)})
	}
	must(t, s.Save(raft.HardState{}, es, true))
	for _, tt := range []struct {
		maxBytes uint64
		want     int
	}{{0, 5}, {1, 1}, {10, 1}, {19, 1}, {20, 2}, {25, 2}, {30, 3}, {50, 5}, {1000, 5}} {
		got, err := s.Entries(1, 6, tt.maxBytes)
		must(t, err)
		if !equalEntries(got, es[:tt.want]) {
			t.Errorf("Entries(1, 6, maxBytes %d) returned %d entries, want %d", tt.maxBytes, len(got), tt.want)
		}
	}
}

func testEntriesResultIsCallers(t *testing.T, s Storage) {
	must(t, s.Save(raft.HardState{}, ents(1, 5, 1), true))
	got, err := s.Entries(1, 3, 0)
	must(t, err)
	// Appending to the result must not write into the storage's log.
	_ = append(got, raft.Entry{Term: 9, Index: 3, Data: []byte("junk")})
	checkEntries(t, s, 1, 6, ents(1, 5, 1))
}

func testConflictTruncation(t *testing.T, s Storage) {
	must(t, s.Save(raft.HardState{}, ents(1, 5, 1), true))
	must(t, s.Save(raft.HardState{}, ents(3, 1, 2), true)) // drops 3..5, appends 3
	checkRange(t, s, 1, 3)
	checkEntries(t, s, 1, 4, append(ents(1, 2, 1), ents(3, 1, 2)...))
	_, err := s.Term(4)
	checkErr(t, "Term(4) of a truncated entry", err, raft.ErrUnavailable)
	// Replacing the whole log, and appending right after it.
	must(t, s.Save(raft.HardState{}, ents(1, 2, 3), true))
	must(t, s.Save(raft.HardState{}, ents(3, 1, 3), true))
	checkEntries(t, s, 1, 4, ents(1, 3, 3))
}

func testHardState(t *testing.T, s Storage) {
	hs := raft.HardState{Term: 3, Vote: 2, Commit: 0}
	must(t, s.Save(hs, nil, true))
	got, _, err := s.InitialState()
	must(t, err)
	if got != hs {
		t.Fatalf("InitialState().HardState = %+v, want %+v", got, hs)
	}
	must(t, s.Save(raft.HardState{}, ents(1, 2, 3), true)) // an empty hard state keeps the old one
	got, _, err = s.InitialState()
	must(t, err)
	if got != hs {
		t.Fatalf("after Save with an empty HardState: %+v, want %+v", got, hs)
	}
	hs = raft.HardState{Term: 4, Vote: 0, Commit: 2}
	must(t, s.Save(hs, nil, true))
	got, _, err = s.InitialState()
	must(t, err)
	if got != hs {
		t.Fatalf("InitialState().HardState = %+v, want %+v", got, hs)
	}
}

var cs123 = raft.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}

func testCompact(t *testing.T, s Storage) {
	must(t, s.Save(raft.HardState{Term: 2, Commit: 5}, append(ents(1, 3, 1), ents(4, 3, 2)...), true))
	must(t, s.Compact(4, []byte("state@4"), cs123))
	checkRange(t, s, 5, 6)
	checkTerm(t, s, 4, 2) // from the snapshot
	checkTerm(t, s, 5, 2)
	checkEntries(t, s, 5, 7, ents(5, 2, 2))
	_, err := s.Term(3)
	checkErr(t, "Term(3) below the snapshot", err, raft.ErrCompacted)
	_, err = s.Entries(4, 6, 0)
	checkErr(t, "Entries(4, 6) below the first index", err, raft.ErrCompacted)

	snap, err := s.Snapshot()
	must(t, err)
	if data := SnapshotData(t, snap); snap.Metadata.Index != 4 || snap.Metadata.Term != 2 || string(data) != "state@4" ||
		!snap.Metadata.ConfState.Equal(cs123) {
		t.Fatalf("Snapshot() = %+v %q", snap.Metadata, data)
	}
	hs, cs, err := s.InitialState()
	must(t, err)
	if !cs.Equal(cs123) || hs.Term != 2 {
		t.Fatalf("InitialState() = %+v, %+v", hs, cs)
	}
	// The log goes on after the snapshot; compacting everything leaves an
	// empty log after it.
	must(t, s.Save(raft.HardState{}, ents(7, 1, 2), true))
	must(t, s.Compact(7, []byte("state@7"), cs123))
	checkRange(t, s, 8, 7)
	checkTerm(t, s, 7, 2)
	checkEntries(t, s, 8, 8, nil)
}

func testCompactErrors(t *testing.T, s Storage) {
	must(t, s.Save(raft.HardState{}, ents(1, 5, 1), true))
	must(t, s.Compact(3, nil, cs123))
	checkErr(t, "Compact(3) again", s.Compact(3, nil, cs123), raft.ErrSnapshotOutOfDate)
	checkErr(t, "Compact(2) below the snapshot", s.Compact(2, nil, cs123), raft.ErrSnapshotOutOfDate)
	checkErr(t, "Compact(6) past the last index", s.Compact(6, nil, cs123), raft.ErrUnavailable)
	checkRange(t, s, 4, 5) // failed compactions change nothing
}

func testSaveOverlappingSnapshot(t *testing.T, s Storage) {
	must(t, s.Save(raft.HardState{}, ents(1, 5, 1), true))
	must(t, s.Compact(3, nil, cs123))
	// Entries 2 and 3 are in the snapshot and ignored; 4.. replace the log.
	must(t, s.Save(raft.HardState{}, append(ents(2, 2, 1), ents(4, 3, 2)...), true))
	checkRange(t, s, 4, 6)
	checkEntries(t, s, 4, 7, ents(4, 3, 2))
	// A batch entirely inside the snapshot changes nothing.
	must(t, s.Save(raft.HardState{}, ents(1, 3, 1), true))
	checkRange(t, s, 4, 6)
}

func testApplySnapshotPastLog(t *testing.T, s Storage) {
	must(t, s.Save(raft.HardState{Term: 3, Vote: 2}, ents(1, 3, 1), true))
	snap := raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 10, Term: 3, ConfState: cs123}, Data: []byte("state@10")}
	must(t, s.ApplySnapshot(snap))
	checkRange(t, s, 11, 10)
	checkTerm(t, s, 10, 3)
	_, err := s.Term(9)
	checkErr(t, "Term(9) below an installed snapshot", err, raft.ErrCompacted)
	_, err = s.Term(11)
	checkErr(t, "Term(11) past an installed snapshot", err, raft.ErrUnavailable)
	got, err := s.Snapshot()
	must(t, err)
	if data := SnapshotData(t, got); got.Metadata.Index != 10 || got.Metadata.Term != 3 || string(data) != "state@10" {
		t.Fatalf("Snapshot() = %+v %q", got.Metadata, data)
	}
	hs, cs, err := s.InitialState()
	must(t, err)
	if hs.Term != 3 || hs.Vote != 2 || !cs.Equal(cs123) {
		t.Fatalf("InitialState() = %+v, %+v", hs, cs)
	}
	must(t, s.Save(raft.HardState{}, ents(11, 2, 3), true))
	checkEntries(t, s, 11, 13, ents(11, 2, 3))
}

func testApplySnapshotInsideLog(t *testing.T, s Storage) {
	// An installed snapshot replaces the whole log, even entries after it.
	must(t, s.Save(raft.HardState{}, ents(1, 8, 1), true))
	must(t, s.ApplySnapshot(raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 5, Term: 2, ConfState: cs123}}))
	checkRange(t, s, 6, 5)
	checkTerm(t, s, 5, 2)
}

func testApplySnapshotOutOfDate(t *testing.T, s Storage) {
	must(t, s.Save(raft.HardState{}, ents(1, 5, 1), true))
	must(t, s.Compact(4, nil, cs123))
	old := raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 3, Term: 1, ConfState: cs123}}
	checkErr(t, "ApplySnapshot older than the current one", s.ApplySnapshot(old), raft.ErrSnapshotOutOfDate)
	same := raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 4, Term: 1, ConfState: cs123}}
	checkErr(t, "ApplySnapshot at the current index", s.ApplySnapshot(same), raft.ErrSnapshotOutOfDate)
	checkRange(t, s, 5, 5)
}

// model is the reference the random workload checks against.
type model struct {
	snap raft.Snapshot
	hs   raft.HardState
	ents []raft.Entry // after snap's index
}

func (m *model) last() uint64 { return m.snap.Metadata.Index + uint64(len(m.ents)) }

// testRandomAgainstModel runs seeded random writes and compares every read
// with the model after each one.
func testRandomAgainstModel(t *testing.T, s Storage) {
	rng := rand.New(rand.NewPCG(7, 11))
	var m model
	term := uint64(1)
	votes := map[uint64]uint64{}
	for step := range 300 {
		var what string
		switch r := rng.IntN(20); {
		case r == 0:
			idx := m.last() + uint64(rng.IntN(5))
			if idx <= m.snap.Metadata.Index {
				idx = m.snap.Metadata.Index + 1
			}
			term++
			snap := raft.Snapshot{
				Metadata: raft.SnapshotMetadata{Index: idx, Term: term, ConfState: raft.ConfState{Voters: []uint64{uint64(step)}}},
				Data:     []byte(fmt.Sprintf("installed %d", step)),
			}
			what = fmt.Sprintf("ApplySnapshot(%d)", idx)
			must(t, s.ApplySnapshot(snap))
			m.snap, m.ents = snap, nil
		case r < 3 && m.last() > m.snap.Metadata.Index:
			idx := m.snap.Metadata.Index + 1 + rng.Uint64N(m.last()-m.snap.Metadata.Index)
			data := []byte(fmt.Sprintf("compacted %d", step))
			cs := raft.ConfState{Voters: []uint64{1, uint64(step)}}
			what = fmt.Sprintf("Compact(%d)", idx)
			must(t, s.Compact(idx, data, cs))
			keep := m.ents[idx-m.snap.Metadata.Index:]
			m.snap = raft.Snapshot{
				Metadata: raft.SnapshotMetadata{Index: idx, Term: m.ents[idx-m.snap.Metadata.Index-1].Term, ConfState: cs},
				Data:     data,
			}
			m.ents = slices.Clone(keep)
		default:
			// Appends, sometimes from below the snapshot or conflicting.
			lo := m.snap.Metadata.Index
			if lo > 2 {
				lo -= 2
			}
			first := m.last() + 1
			if rng.IntN(3) == 0 {
				first = lo + 1 + rng.Uint64N(m.last()-lo+1)
				term++
			}
			batch := ents(first, uint64(rng.IntN(4)), term)
			hs := raft.HardState{}
			if rng.IntN(2) == 0 {
				// One vote per term: once cast, it stays.
				if votes[term] == 0 {
					votes[term] = rng.Uint64N(4)
				}
				hs = raft.HardState{Term: term, Vote: votes[term], Commit: m.snap.Metadata.Index}
			}
			what = fmt.Sprintf("Save(%+v, %v)", hs, indexes(batch))
			must(t, s.Save(hs, batch, true))
			if !hs.IsEmpty() {
				m.hs = hs
			}
			for _, e := range batch {
				if e.Index > m.snap.Metadata.Index {
					m.ents = append(m.ents[:e.Index-m.snap.Metadata.Index-1], e)
				}
			}
		}
		compare(t, s, &m, step, what)
	}
}

// compare checks every read of s against m.
func compare(t *testing.T, s Storage, m *model, step int, what string) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("step %d, after %s: %s", step, what, fmt.Sprintf(format, args...))
	}
	snapIndex := m.snap.Metadata.Index
	first, err := s.FirstIndex()
	must(t, err)
	last, err := s.LastIndex()
	must(t, err)
	if first != snapIndex+1 || last != m.last() {
		fail("FirstIndex, LastIndex = %d, %d; want %d, %d", first, last, snapIndex+1, m.last())
	}
	got, err := s.Entries(first, last+1, 0)
	must(t, err)
	if !equalEntries(got, m.ents) {
		fail("Entries = %v, want %v", indexes(got), indexes(m.ents))
	}
	if term, err := s.Term(snapIndex); err != nil || term != m.snap.Metadata.Term {
		fail("Term(%d) = %d, %v; want the snapshot's term %d", snapIndex, term, err, m.snap.Metadata.Term)
	}
	if snapIndex > 0 {
		if _, err := s.Term(snapIndex - 1); !errors.Is(err, raft.ErrCompacted) {
			fail("Term(%d) = %v, want ErrCompacted", snapIndex-1, err)
		}
	}
	hs, cs, err := s.InitialState()
	must(t, err)
	// ApplySnapshot may raise Commit to the snapshot's index.
	if hs.Term != m.hs.Term || hs.Vote != m.hs.Vote || hs.Commit < m.hs.Commit || hs.Commit > max(m.hs.Commit, snapIndex) {
		fail("InitialState().HardState = %+v, want %+v (Commit at most raised to %d)", hs, m.hs, snapIndex)
	}
	if !cs.Equal(m.snap.Metadata.ConfState) {
		fail("InitialState().ConfState = %+v, want %+v", cs, m.snap.Metadata.ConfState)
	}
	snap, err := s.Snapshot()
	must(t, err)
	if data := SnapshotData(t, snap); snap.Metadata.Index != snapIndex || snap.Metadata.Term != m.snap.Metadata.Term || !bytes.Equal(data, m.snap.Data) {
		fail("Snapshot() = %+v %q, want %+v %q", snap.Metadata, data, m.snap.Metadata, m.snap.Data)
	}
}

// SnapshotData reads a snapshot's data, from Data or through its Source
// (Storage.Snapshot may return either), failing t if it cannot.
func SnapshotData(t testing.TB, snap raft.Snapshot) []byte {
	t.Helper()
	r, err := snap.Open()
	if err != nil {
		t.Fatalf("open snapshot %d: %v", snap.Metadata.Index, err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read snapshot %d: %v", snap.Metadata.Index, err)
	}
	if int64(len(data)) != snap.Size() {
		t.Fatalf("snapshot %d: read %d bytes, its Size says %d", snap.Metadata.Index, len(data), snap.Size())
	}
	return data
}

package raft_test

import (
	"reflect"
	"testing"

	"coord/raft"
	"coord/raft/rafttest"
)

// naiveConfChanges works the memberships out again from the committed
// entries, the way every caller did before the core handed them over: the
// Ready's ConfChanges must say the same.
func naiveConfChanges(conf *raft.ConfState, entries []raft.Entry) []raft.CommittedConfChange {
	var out []raft.CommittedConfChange
	for _, e := range entries {
		if e.Type != raft.EntryConfChange {
			continue
		}
		cc, err := raft.UnmarshalConfChange(e.Data)
		if err != nil {
			continue
		}
		cs, err := raft.ApplyConfChange(*conf, cc)
		if err != nil {
			continue
		}
		*conf = cs
		out = append(out, raft.CommittedConfChange{Index: e.Index, Term: e.Term, Change: cc, Conf: cs})
	}
	return out
}

// A Ready hands over, with its committed entries, the membership each
// change among them produced, as the core worked it out on append: equal to
// working it out again from the entries. The entries come one per Ready (a
// tiny MaxCommittedBytesPerReady), so changes committed long before they
// are applied must still be there; the log holds a change that does not
// decode and one that does not apply (no-ops on every node), and a restart
// hands the changes of the replayed log over again.
func TestReadyConfChangesMatchTheEntries(t *testing.T) {
	change := func(cs ...raft.ConfChangeSingle) []byte { return raft.ConfChange{Changes: cs}.Marshal() }
	log := []raft.Entry{
		{Index: 1, Term: 1, Type: raft.EntryConfChange, Data: change(raft.ConfChangeSingle{Type: raft.ConfChangeAddVoter, NodeID: 1})},
		{Index: 2, Term: 1, Data: []byte("x")},
		{Index: 3, Term: 1, Type: raft.EntryConfChange, Data: change(raft.ConfChangeSingle{Type: raft.ConfChangeAddLearner, NodeID: 2})},
		{Index: 4, Term: 1, Type: raft.EntryConfChange, Data: []byte{9, 9, 9}},
		{Index: 5, Term: 1, Type: raft.EntryConfChange, Data: change(raft.ConfChangeSingle{Type: raft.ConfChangeRemove, NodeID: 1})},
		{Index: 6, Term: 1, Type: raft.EntryConfChange, Data: change(raft.ConfChangeSingle{Type: raft.ConfChangeAddLearner, NodeID: 3})},
		{Index: 7, Term: 1, Data: []byte("y")},
		{Index: 8, Term: 1, Type: raft.EntryConfChange, Data: change(raft.ConfChangeSingle{Type: raft.ConfChangeRemove, NodeID: 3})},
	}
	s := raft.NewMemoryStorage()
	if err := s.Append(log); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHardState(raft.HardState{Term: 1, Commit: 8}); err != nil {
		t.Fatal(err)
	}
	start := func() *raft.Core {
		cfg := rafttest.DefaultConfig(1)
		cfg.Storage = s
		cfg.MaxCommittedBytesPerReady = 1
		c, err := raft.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// drain handles every Ready, comparing its ConfChanges with the naive
	// ones, and returns every change handed over.
	drain := func(c *raft.Core) []raft.CommittedConfChange {
		var conf raft.ConfState
		var all []raft.CommittedConfChange
		for c.HasReady() {
			rd := c.Ready()
			_ = s.Append(rd.Entries)
			if !rd.HardState.IsEmpty() {
				_ = s.SetHardState(rd.HardState)
			}
			want := naiveConfChanges(&conf, rd.CommittedEntries)
			if len(rd.ConfChanges) != len(want) || (len(want) > 0 && !reflect.DeepEqual(rd.ConfChanges, want)) {
				t.Fatalf("Ready with committed entries %v: ConfChanges %+v, want %+v", rd.CommittedEntries, rd.ConfChanges, want)
			}
			all = append(all, rd.ConfChanges...)
			c.Advance(rd)
		}
		return all
	}
	c := start()
	// Before any of the committed changes is handed over, the node wins
	// an election and appends an entry of its term: the appended-on-top
	// entry must not make the core forget the changes below it.
	c.Campaign()
	first := drain(c)
	var at []uint64
	for _, cc := range first {
		at = append(at, cc.Index)
	}
	if !reflect.DeepEqual(at, []uint64{1, 3, 6, 8}) {
		t.Fatalf("changes at %v, want at 1, 3, 6 and 8 (4 does not decode, 5 would leave no voter)", at)
	}
	// Restarted from the same storage, the node applies the log again, and
	// is handed the same changes again.
	if again := drain(start()); !reflect.DeepEqual(again, first) {
		t.Fatalf("after a restart: %+v, want %+v", again, first)
	}
}

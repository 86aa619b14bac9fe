package storagetest

import (
	"testing"

	"coord/raft"
)

// Crashable is a Storage under test with a way to lose power: Crash
// abandons the Storage (without Close), drops whatever it did not make
// durable, and returns the Storage opened again from what survived. A
// Storage held in memory, as durable as its process, may return itself.
type Crashable struct {
	Storage Storage
	Crash   func() Storage
}

// RunCrash runs the durability tests: each test gets a new, empty
// Crashable from newCrashable, writes, crashes it, and checks what the
// reopened Storage holds against the Save contract (node.Storage): what a
// synced Save stored survives; a Save without sync that changes only the
// commit index may be lost (the hard state is then the one before it, never
// anything else), but entries and a new term or vote survive whatever sync
// said; and a synced Save makes the earlier ones durable too.
func RunCrash(t *testing.T, newCrashable func(t *testing.T) Crashable) {
	tests := []struct {
		name string
		test func(t *testing.T, c Crashable)
	}{
		{"SyncedSaveSurvives", testSyncedSaveSurvives},
		{"UnsyncedCommitMayBeLost", testUnsyncedCommitMayBeLost},
		{"VoteSurvivesWithoutSync", testVoteSurvivesWithoutSync},
		{"EntriesSurviveWithoutSync", testEntriesSurviveWithoutSync},
		{"SyncCoversEarlierSaves", testSyncCoversEarlierSaves},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.test(t, newCrashable(t)) })
	}
}

func hardState(t *testing.T, s Storage) raft.HardState {
	t.Helper()
	hs, _, err := s.InitialState()
	must(t, err)
	return hs
}

func testSyncedSaveSurvives(t *testing.T, c Crashable) {
	hs := raft.HardState{Term: 2, Vote: 1, Commit: 2}
	must(t, c.Storage.Save(hs, ents(1, 3, 2), true))
	s := c.Crash()
	if got := hardState(t, s); got != hs {
		t.Fatalf("after a crash, hard state %+v, want %+v", got, hs)
	}
	checkRange(t, s, 1, 3)
	checkEntries(t, s, 1, 4, ents(1, 3, 2))
}

// testUnsyncedCommitMayBeLost: a commit index saved without sync comes
// back after a crash, or the hard state before it does; nothing else.
func testUnsyncedCommitMayBeLost(t *testing.T, c Crashable) {
	before := raft.HardState{Term: 2, Vote: 1, Commit: 1}
	after := raft.HardState{Term: 2, Vote: 1, Commit: 3}
	must(t, c.Storage.Save(before, ents(1, 3, 2), true))
	must(t, c.Storage.Save(after, nil, false))
	if got := hardState(t, c.Storage); got != after {
		t.Fatalf("before the crash, hard state %+v, want %+v", got, after)
	}
	s := c.Crash()
	switch got := hardState(t, s); got {
	case after:
		t.Log("the unsynced commit index survived the crash")
	case before:
		t.Log("the unsynced commit index was lost in the crash")
	default:
		t.Fatalf("after a crash, hard state %+v, want %+v or %+v", got, before, after)
	}
	checkEntries(t, s, 1, 4, ents(1, 3, 2))
}

// testVoteSurvivesWithoutSync: only a commit index may wait for a sync; a
// new term and vote are durable on return even if the caller said no sync
// (a node that forgot its vote could vote twice in one term).
func testVoteSurvivesWithoutSync(t *testing.T, c Crashable) {
	must(t, c.Storage.Save(raft.HardState{Term: 2, Vote: 1, Commit: 1}, ents(1, 1, 2), true))
	voted := raft.HardState{Term: 3, Vote: 2, Commit: 1}
	must(t, c.Storage.Save(voted, nil, false))
	s := c.Crash()
	if got := hardState(t, s); got.Term != voted.Term || got.Vote != voted.Vote {
		t.Fatalf("after a crash, hard state %+v: the term-%d vote for %d was lost", got, voted.Term, voted.Vote)
	}
}

// testEntriesSurviveWithoutSync: entries are durable on return whatever
// sync says (an append acknowledgement promises them).
func testEntriesSurviveWithoutSync(t *testing.T, c Crashable) {
	must(t, c.Storage.Save(raft.HardState{Term: 2, Vote: 1}, ents(1, 2, 2), true))
	must(t, c.Storage.Save(raft.HardState{}, ents(3, 2, 2), false))
	s := c.Crash()
	checkRange(t, s, 1, 4)
	checkEntries(t, s, 1, 5, ents(1, 4, 2))
}

// testSyncCoversEarlierSaves: a synced Save makes durable the unsynced
// commit index saved before it.
func testSyncCoversEarlierSaves(t *testing.T, c Crashable) {
	must(t, c.Storage.Save(raft.HardState{Term: 2, Vote: 1, Commit: 1}, ents(1, 3, 2), true))
	must(t, c.Storage.Save(raft.HardState{Term: 2, Vote: 1, Commit: 3}, nil, false))
	must(t, c.Storage.Save(raft.HardState{}, ents(4, 1, 2), true))
	s := c.Crash()
	if got, want := hardState(t, s), (raft.HardState{Term: 2, Vote: 1, Commit: 3}); got != want {
		t.Fatalf("after a synced Save and a crash, hard state %+v, want %+v", got, want)
	}
	checkRange(t, s, 1, 4)
}

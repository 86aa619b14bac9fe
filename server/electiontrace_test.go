package server

import (
	"log/slog"
	"testing"

	"coord/node"
	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/vfs"
)

// The election trace logs each durable change of term or vote once, and
// nothing for a write that keeps them (entries, a commit index), from the
// term and vote the Disk had when it was opened.
func TestTracedStorageLogsEachNewTermOrVote(t *testing.T) {
	dir := t.TempDir()
	hook := newTraceHook()
	const durable = "trace: term and vote durable"
	open := func() (*raftstore.Disk, node.Storage) {
		t.Helper()
		disk, err := raftstore.Open(vfs.OS, dir, raftstore.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		n := &Node{log: slog.New(hook)}
		var nc node.Config
		n.traced(&nc, disk)
		return disk, nc.Storage
	}
	disk, s := open()
	logged := 0
	steps := []struct {
		what string
		hs   raft.HardState
		ents []raft.Entry
		logs int
	}{
		{"a first term and vote", raft.HardState{Term: 1, Vote: 1}, nil, 1},
		{"entries in the same term", raft.HardState{Term: 1, Vote: 1}, []raft.Entry{{Index: 1, Term: 1}}, 0},
		{"a commit index", raft.HardState{Term: 1, Vote: 1, Commit: 1}, nil, 0},
		{"entries alone", raft.HardState{}, []raft.Entry{{Index: 2, Term: 1}}, 0},
		{"a new term without a vote", raft.HardState{Term: 2, Commit: 1}, nil, 1},
		{"a vote in that term", raft.HardState{Term: 2, Vote: 3, Commit: 1}, nil, 1},
		{"the same again", raft.HardState{Term: 2, Vote: 3, Commit: 1}, nil, 0},
	}
	check := func(what string, hs raft.HardState, ents []raft.Entry, logs int) {
		t.Helper()
		if err := s.Save(hs, ents, true); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		logged += logs
		hook.mu.Lock()
		got := hook.counts[durable]
		hook.mu.Unlock()
		if got != logged {
			t.Fatalf("after %s (%+v): %d trace lines, want %d", what, hs, got, logged)
		}
	}
	for _, st := range steps {
		check(st.what, st.hs, st.ents, st.logs)
	}
	if err := disk.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened: the term and vote on disk are known from the start.
	disk, s = open()
	defer disk.Close()
	check("the durable term and vote after a restart", raft.HardState{Term: 2, Vote: 3, Commit: 1}, nil, 0)
	check("a new term after a restart", raft.HardState{Term: 3, Vote: 3, Commit: 1}, nil, 1)
}

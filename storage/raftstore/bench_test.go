package raftstore_test

import (
	"path/filepath"
	"testing"

	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/vfs"
)

// BenchmarkSaveVote measures a Save that changes only the term and vote
// (what a candidate and each voter write in an election), on the real file
// system: each iteration moves to a new term and votes in it.
func BenchmarkSaveVote(b *testing.B) {
	d, err := raftstore.Open(vfs.OS, filepath.Join(b.TempDir(), "node"), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	if err := d.Save(raft.HardState{Term: 1, Vote: 1, Commit: 1}, []raft.Entry{{Index: 1, Term: 1}}, true); err != nil {
		b.Fatal(err)
	}
	term := uint64(1)
	for b.Loop() {
		term++
		if err := d.Save(raft.HardState{Term: term, Vote: 2, Commit: 1}, nil, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSaveEntry measures a Save of one small entry, for comparison: one
// log sync.
func BenchmarkSaveEntry(b *testing.B) {
	d, err := raftstore.Open(vfs.OS, filepath.Join(b.TempDir(), "node"), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	if err := d.Save(raft.HardState{Term: 1, Vote: 1}, nil, true); err != nil {
		b.Fatal(err)
	}
	index := uint64(0)
	for b.Loop() {
		index++
		if err := d.Save(raft.HardState{Term: 1, Vote: 1, Commit: index - 1}, []raft.Entry{{Index: index, Term: 1, Data: []byte("x")}}, true); err != nil {
			b.Fatal(err)
		}
	}
}

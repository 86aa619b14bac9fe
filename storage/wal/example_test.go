package wal_test

import (
	"fmt"

	"coord/raft"
	"coord/storage/vfs"
	"coord/storage/wal"
)

// Append writes a batch, Sync makes it durable. A batch appended but not
// synced is lost in a crash, whole.
func Example() {
	fsys := vfs.NewMemFS()
	w, _, err := wal.Open(fsys, "/wal", wal.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	w.Append(raft.HardState{Term: 1, Vote: 1}, []raft.Entry{{Term: 1, Index: 1, Data: []byte("a")}})
	w.Sync()
	w.Append(raft.HardState{Term: 1, Vote: 1, Commit: 1}, []raft.Entry{{Term: 1, Index: 2, Data: []byte("b")}})
	fsys.Crash()

	_, state, err := wal.Open(fsys, "/wal", wal.Options{})
	fmt.Println(len(state.Entries), state.HardState, err)
	// Output: 1 {1 1 0} <nil>
}

package raftstore_test

import (
	"fmt"
	"io"

	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/vfs"
)

// A node saves its hard state and entries; Save returns once they are
// durable. After a crash that loses everything unsynced, reopening recovers
// exactly what Save acknowledged.
func Example() {
	fsys := vfs.NewMemFS() // vfs.OS for a real disk
	disk, err := raftstore.Open(fsys, "/node1", raftstore.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = disk.Save(raft.HardState{Term: 2, Vote: 1, Commit: 1}, []raft.Entry{
		{Term: 1, Index: 1, Data: []byte("x=1")},
		{Term: 2, Index: 2, Data: []byte("x=2")},
	}, true)

	if err != nil {
		fmt.Println(err)
		return
	}
	// Compact the log up to index 1 into a snapshot of the state machine.
	if err := disk.Compact(1, []byte("state: x=1"), raft.ConfState{Voters: []uint64{1, 2, 3}}); err != nil {
		fmt.Println(err)
		return
	}

	fsys.Crash() // the Disk is abandoned, as a crashed process would
	disk, err = raftstore.Open(fsys, "/node1", raftstore.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	hs, cs, _ := disk.InitialState()
	first, _ := disk.FirstIndex()
	last, _ := disk.LastIndex()
	ents, _ := disk.Entries(first, last+1, 0)
	snap, _ := disk.Snapshot()
	// The snapshot's data is read from its file as a stream, verified
	// as it goes (Open read only its header).
	r, err := snap.Open()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("hard state %+v, voters %v\n", hs, cs.Voters)
	fmt.Printf("snapshot at %d: %q; entries %d..%d: %q\n", snap.Metadata.Index, data, first, last, ents[0].Data)
	// Output:
	// hard state {Term:2 Vote:1 Commit:1}, voters [1 2 3]
	// snapshot at 1: "state: x=1"; entries 2..2: "x=2"
}

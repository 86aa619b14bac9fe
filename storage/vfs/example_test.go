package vfs_test

import (
	"fmt"

	"coord/storage/vfs"
)

// A crash keeps only what was synced: the file's name needs a SyncDir of its
// directory, its data a File.Sync.
func ExampleMemFS_Crash() {
	m := vfs.NewMemFS()
	f, _ := m.Create("/log")
	f.Write([]byte("durable "))
	f.Sync()
	m.SyncDir("/")
	f.Write([]byte("lost"))
	m.Crash()

	data, _ := vfs.ReadFile(m, "/log")
	fmt.Printf("%q\n", data)
	// Output: "durable "
}

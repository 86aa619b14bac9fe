package server_test

import (
	"fmt"
	"time"

	"coord/server"
)

// The state machine alone: commands go in at log indexes, results come
// out; revisions and fencing tokens are the log indexes.
func ExampleMachine() {
	m := server.NewMachine(server.DefaultLimits())
	put := server.Command{Op: server.OpPut, Key: "config", Value: []byte("v1")}
	fmt.Println(m.Apply(1, put.Marshal()).Revision)

	cas := server.Command{Op: server.OpPut, Key: "config", Value: []byte("v2"), HasPrev: true, PrevRevision: 7}
	fmt.Println(m.Apply(2, cas.Marshal()).Status)

	acquire := server.Command{Op: server.OpAcquire, Key: "leader", Holder: "a", TTL: 5 * time.Second}
	r := m.Apply(3, acquire.Marshal())
	fmt.Println(r.Holder, r.Token)

	// A retry of the same session write is answered, not applied again.
	w := server.Command{Op: server.OpPut, Key: "n", Client: 9, Seq: 1}
	fmt.Println(m.Apply(4, w.Marshal()).Revision, m.Apply(5, w.Marshal()).Revision)
	// Output:
	// 1
	// conflict
	// a 3
	// 4 4
}

package server

import (
	"fmt"
	"testing"
	"time"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestWriteWakesOnlyTheWatchesOfWhatItChanged applies commands to the
// node's state machine and checks which watch channels closed: those of
// the key or lease the command changed, none for a command that changed
// nothing, every one for a restored snapshot.
func TestWriteWakesOnlyTheWatchesOfWhatItChanged(t *testing.T) {
	s := &stateMachine{machine: NewMachine(DefaultLimits()), lessor: newLessor(time.Second), changed: make(chan struct{})}
	index := uint64(0)
	apply := func(c Command) Result {
		index++
		return s.Apply(index, c.Marshal()).(Result)
	}
	a, b := s.watches.wait(Watched{Name: "a"}), s.watches.wait(Watched{Name: "b"})
	leaseA := s.watches.wait(Watched{Lease: true, Name: "a"})
	apply(Command{Op: OpPut, Key: "a", Value: []byte("1")})
	if !closed(a) || closed(b) || closed(leaseA) {
		t.Fatalf("a put of key a woke: key a %v, key b %v, lease a %v; want only key a", closed(a), closed(b), closed(leaseA))
	}
	a = s.watches.wait(Watched{Name: "a"})
	if closed(a) {
		t.Fatal("a new wait on key a is already closed")
	}
	// A command that changes nothing wakes nothing.
	apply(Command{Op: OpDelete, Key: "nope"})
	apply(Command{Op: OpPut, Key: "a", Value: []byte("2"), HasPrev: true, PrevRevision: 99})
	apply(Command{Op: OpRenew, Key: "a", Holder: "h", Token: 7})
	if closed(a) || closed(b) || closed(leaseA) {
		t.Fatal("a refused command woke a watch")
	}
	r := apply(Command{Op: OpAcquire, Key: "a", Holder: "h", TTL: time.Second})
	if !closed(leaseA) || closed(a) || closed(b) {
		t.Fatal("an acquire of lease a did not wake only the watches of lease a")
	}
	leaseA = s.watches.wait(Watched{Lease: true, Name: "a"})
	apply(Command{Op: OpRelease, Key: "a", Holder: "h", Token: r.Token})
	if !closed(leaseA) {
		t.Fatal("a release did not wake the lease's watches")
	}
	// A restored snapshot may have changed anything.
	snap := s.machine.Snapshot()
	if err := s.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if !closed(a) || !closed(b) {
		t.Fatal("a restore did not wake every watch")
	}
}

// TestWatchIndexStaysBounded waits on more keys than the bound, none of
// them ever written: the index starts afresh (waking its watches, which
// wait again) instead of growing.
func TestWatchIndexStaysBounded(t *testing.T) {
	var x watchIndex
	first := x.wait(Watched{Name: "k0"})
	for i := 1; i <= watchIndexMin; i++ {
		x.wait(Watched{Name: fmt.Sprint("k", i)})
	}
	if len(x.chans) > watchIndexMin {
		t.Fatalf("%d channels, over the bound %d", len(x.chans), watchIndexMin)
	}
	if !closed(first) {
		t.Fatal("starting afresh did not wake the watches it forgot")
	}
}

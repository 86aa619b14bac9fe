package sim

import (
	"container/heap"

	"coord/raft"
)

// eventKind says what an event does when its time comes.
type eventKind uint8

const (
	eventTick eventKind = iota + 1
	eventDeliver
	eventFault
	eventHeal
	eventRestart
	eventClientWrite
	eventClientRead
	eventPhase
	eventCrash
	eventSpace    // a full disk has space again
	eventPeerGone // a node sees its connection to peer close
	eventSnapshot // a background snapshot is written (snapshot.go)
)

// event is one scheduled step. seq breaks ties so that the order never
// depends on the heap's internals.
type event struct {
	at          int64 // simulated microseconds
	seq         uint64
	kind        eventKind
	node        uint64
	incarnation int
	msg         raft.Message
	// peer is the node whose connection closed (eventPeerGone); link is
	// the connection a message was sent on (eventDeliver): a cut resets
	// it, and the messages in flight on it are lost.
	peer uint64
	link uint64
	// work and finish are a background snapshot's (eventSnapshot).
	work   func() error
	finish func(error)
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}

func (s *Sim) schedule(e *event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.events, e)
}

func (s *Sim) next() *event {
	if len(s.events) == 0 {
		return nil
	}
	return heap.Pop(&s.events).(*event)
}

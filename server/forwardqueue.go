package server

import (
	"sync"
	"sync/atomic"

	"coord/node"
)

// forwardQueue hands the writes a follower forwards to its node's loop in
// batches (node.Node.ForwardEach): the writes' goroutines queue them and
// go on to wait for their outcome, and one goroutine (feedForwards) hands
// over whatever is queued whenever the loop takes it. Handing each write
// over itself (node.Node.Forward) woke the loop and the write's goroutine
// once per write: at 256 clients, a third of a follower's goroutine
// wake-ups. Safe for concurrent use.
type forwardQueue struct {
	mu      sync.Mutex
	pending []node.Forwarding // in the order they came
	ended   bool              // the feeder is gone: nothing queued is taken
	wake    chan struct{}     // capacity 1: something was queued
}

func newForwardQueue() *forwardQueue {
	return &forwardQueue{wake: make(chan struct{}, 1)}
}

// push queues c for the loop. Once the loop has ended it queues nothing:
// c's wait sees the end and gives c up as not sent.
func (q *forwardQueue) push(c *forwardCall) {
	q.mu.Lock()
	if q.ended {
		q.mu.Unlock()
		return
	}
	q.pending = append(q.pending, c)
	q.mu.Unlock()
	c.forwards.count(&c.forwards.queued)
	select {
	case q.wake <- struct{}{}:
	default: // a wake-up is on its way already
	}
}

// feedForwards hands the queued writes to the loop until the loop ends;
// then it drops what is queued, queues nothing more, and closes feedDone.
// Writes left are never taken: their waits see the loop's end and give up
// (ProposeForwarded).
func (n *Node) feedForwards() {
	q := n.forwardQueue
	defer func() {
		q.mu.Lock()
		q.ended, q.pending = true, nil
		q.mu.Unlock()
		close(n.feedDone)
	}()
	var batch []node.Forwarding
	more := false // the loop left some of the last batch
	for {
		if !more {
			select {
			case <-q.wake:
			case <-n.shell.Done():
				return
			}
		}
		q.mu.Lock()
		batch, q.pending = q.pending, batch[:0]
		q.mu.Unlock()
		if len(batch) == 0 {
			more = false
			continue
		}
		taken, err := n.shell.ForwardEach(batch)
		if err != nil {
			return // the loop ended: see above
		}
		// What the loop left (past its batch's bound on entry data) goes
		// first next time, before what was queued meanwhile.
		more = taken < len(batch)
		if more {
			clear(batch[:taken]) // the loop's now: hold none of them
			q.mu.Lock()
			q.pending = append(batch[taken:len(batch):len(batch)], q.pending...)
			q.mu.Unlock()
			batch = nil // its array is the queue's now
			continue
		}
		clear(batch) // the writes are the loop's now: hold none of them
	}
}

// The states of a forwardCall: queued until the loop takes it (taken) or
// refuses it here (refused), unless its wait gave up first (abandoned),
// and then the loop skips it.
const (
	forwardQueued int32 = iota
	forwardTaken
	forwardRefused
	forwardAbandoned
)

// forwardCall is one forwarded write: what its wait (ProposeForwarded)
// shares with the queue and the node's loop, which calls Take and Refused
// (node.Forwarding), place and done (node.ForwardWaiter).
type forwardCall struct {
	data     []byte
	waiter   node.ForwardWaiter
	outcome  chan forwardOutcome // capacity forwardOutcomes
	forwards *forwardWaiters     // for its counters
	state    atomic.Int32
	// placed is set once the leader said where it appended the write. It
	// matters only if the leader changes: a flag the wait reads then,
	// rather than a channel that would wake it for every write (at 256
	// clients the follower woke each waiting write at its leader's
	// answer, to park it again: half of its goroutines' wake-ups).
	placed atomic.Bool
}

var _ node.Forwarding = (*forwardCall)(nil)

// Take implements node.Forwarding.
func (c *forwardCall) Take() ([]byte, node.ForwardWaiter, bool) {
	if !c.state.CompareAndSwap(forwardQueued, forwardTaken) {
		return nil, node.ForwardWaiter{}, false
	}
	c.forwards.count(&c.forwards.handed)
	return c.data, c.waiter, true
}

// Refused implements node.Forwarding: the handler's refusal comes as its
// verdict.
func (c *forwardCall) Refused(err error) {
	c.state.Store(forwardRefused)
	c.outcome <- forwardOutcome{isVerdict: true, verdict: node.Result{Err: err}}
}

// abandon gives the write up if the loop has not taken it, and reports
// whether it did: then it went nowhere.
func (c *forwardCall) abandon() bool {
	return c.state.CompareAndSwap(forwardQueued, forwardAbandoned)
}

func (c *forwardCall) place(uint64, uint64) {
	c.placed.Store(true)
	c.forwards.count(&c.forwards.placed)
}

func (c *forwardCall) done(r node.Result) { c.outcome <- forwardOutcome{isVerdict: true, verdict: r} }

package server

import (
	"sync/atomic"

	"coord/node"
)

// queueForward queues c for the node's loop (node.Node.QueueForward),
// which takes it with whatever else was queued meanwhile, and counts it if
// it was queued: once the loop has ended it is not, and c's wait sees the
// end and gives c up as not sent. The loop takes the queue itself, also
// while a follower writes a Ready: a goroutine between the writes and the
// loop (node.Node.ForwardEach) woke twice per batch, and the writes
// queued during a follower's fsync waited for it before they left.
func (n *Node) queueForward(c *forwardCall) {
	if n.shell.QueueForward(c) {
		c.forwards.count(&c.forwards.queued)
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

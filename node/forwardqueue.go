package node

import "sync"

// forwardQueue holds the proposals QueueForward queued for the loop, which
// takes whatever is queued in one go whenever it comes round (run, drain),
// and also while a follower's Ready is written (writeBesideForwards). The
// proposers' goroutines queue and go on to wait for their outcome. Safe for
// concurrent use; left is the loop's alone.
type forwardQueue struct {
	mu      sync.Mutex
	pending []Forwarding  // in the order they came
	spare   []Forwarding  // the loop's last batch array, emptied, for reuse
	ended   bool          // the loop ended: nothing queued is taken
	wake    chan struct{} // capacity 1: something was queued
}

func newForwardQueue() *forwardQueue {
	return &forwardQueue{wake: make(chan struct{}, 1)}
}

// signal wakes the loop for the queue, unless a wake-up is on its way.
func (q *forwardQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// QueueForward queues f for the loop, which proposes it as ForwardEach
// does (Take, then Forward, or Refused), with whatever else is queued, in
// the order queued: a proposer hands its proposal over with no wake-up of
// its own, and the loop takes many at once. A follower's loop takes them
// also while it writes a Ready, and sends them to the leader at once
// (Config.HoldForwardsDuringWrites): they need not wait for its disk.
// It reports whether f was queued: once the loop has ended it is not, and
// nothing of f is called; the caller sees Done closed.
func (n *Node) QueueForward(f Forwarding) bool {
	q := n.forwards
	q.mu.Lock()
	if q.ended {
		q.mu.Unlock()
		return false
	}
	q.pending = append(q.pending, f)
	q.mu.Unlock()
	q.signal()
	return true
}

// takeForwards proposes what is queued, on the loop goroutine, as
// ForwardEach does: bounded by MaxEntryBytesPerBatch if bounded, the rest
// queued again in front, with a wake-up for it.
func (n *Node) takeForwards(bounded bool) {
	q := n.forwards
	q.mu.Lock()
	batch := q.pending
	q.pending, q.spare = q.spare, nil
	q.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	taken := n.forwardEach(batch, bounded)
	if taken == len(batch) {
		clear(batch) // the proposals are the loop's now: hold none of them
		q.mu.Lock()
		if q.spare == nil {
			q.spare = batch[:0]
		}
		q.mu.Unlock()
		return
	}
	// What the loop left goes first next time, before what was queued
	// meanwhile, in an array of its own: the part taken must not stay in
	// the queue's array (each proposal's data would live as long as it).
	rest := append([]Forwarding(nil), batch[taken:]...)
	clear(batch)
	q.mu.Lock()
	q.pending = append(rest, q.pending...)
	q.mu.Unlock()
	q.signal()
}

// endForwards drops what is queued and queues nothing more: the loop has
// ended. The proposers see Done and give their proposals up.
func (n *Node) endForwards() {
	q := n.forwards
	q.mu.Lock()
	q.ended, q.pending, q.spare = true, nil, nil
	q.mu.Unlock()
}

// writeBesideForwards is the handler's WriteBeside: it runs write (a
// follower's Ready) on a goroutine of its own and, until write returns,
// takes the proposals queued for forwarding and sends them to the leader.
// Without it, a write queued while the follower wrote waited for the end
// of that write (an fsync) before it left for the leader, where it waited
// for the leader's own: under 64 clients spread over three members on two
// loaded cores, the wait in the follower's queue was 6 ms at the median of
// a 30 ms write (docs/BENCHMARKS.md, issue 21, spreadcost). It costs a
// goroutine and its wake-up of the loop per write, so it runs only while
// the follower forwards: it took a proposal to forward since its last
// write, or one it sent is still unanswered. A follower that forwards
// nothing (its clients' writes all go to the leader) writes on the loop's
// goroutine as before: written beside on every follower write, the
// goroutine cost a lone client's write about 0.2 ms at the median on a
// quiet machine, for nothing (the lead, on merging spreadcost).
func (n *Node) writeBesideForwards(write func() error) error {
	forwarding := n.forwardedSinceWrite || n.h.ForwardsUnanswered() > 0
	n.forwardedSinceWrite = false
	if n.cfg.HoldForwardsDuringWrites || !forwarding {
		return write()
	}
	done := make(chan error, 1)
	go func() { done <- write() }()
	for {
		select {
		case err := <-done:
			return err
		case <-n.forwards.wake:
			// Unbounded: these go to the leader, not into the write.
			n.takeForwards(false)
			n.h.SendForwards()
		}
	}
}

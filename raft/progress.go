package raft

import (
	"fmt"

	"coord/internal/assert"
)

// ProgressState is how a leader is replicating to one follower.
type ProgressState uint8

const (
	// ProgressProbe sends one append at a time until the follower's match
	// is found (after an election or a rejection).
	ProgressProbe ProgressState = iota + 1
	// ProgressReplicate pipelines appends, up to MaxInflightMsgs in flight.
	ProgressReplicate
	// ProgressSnapshot waits for the follower to install a snapshot.
	ProgressSnapshot
)

// String returns the state's name.
func (s ProgressState) String() string {
	switch s {
	case ProgressProbe:
		return "probe"
	case ProgressReplicate:
		return "replicate"
	case ProgressSnapshot:
		return "snapshot"
	default:
		return fmt.Sprintf("ProgressState(%d)", uint8(s))
	}
}

// Progress is the leader's view of one follower (Figure 2: nextIndex[] and
// matchIndex[], plus flow control).
type Progress struct {
	// Match is the highest index known to be replicated on the follower.
	Match uint64
	// Next is the index of the next entry to send.
	Next  uint64
	State ProgressState
	// PendingSnapshot is the index of the snapshot being sent, in
	// ProgressSnapshot.
	PendingSnapshot uint64
	// RecentActive is set when the follower answers, and cleared at each
	// check-quorum round.
	RecentActive bool
	// ProbeSent pauses a probing follower until it answers.
	ProbeSent bool
	// snapshotTicks counts ticks spent in ProgressSnapshot; the leader
	// retries when a snapshot seems lost.
	snapshotTicks int
	inflights     inflights
}

func newProgress(next uint64, maxInflight int) *Progress {
	return &Progress{Next: next, State: ProgressProbe, inflights: newInflights(maxInflight)}
}

func (p *Progress) resetState(state ProgressState) {
	p.ProbeSent = false
	p.PendingSnapshot = 0
	p.snapshotTicks = 0
	p.State = state
	p.inflights.reset()
}

func (p *Progress) becomeProbe() {
	if p.State == ProgressSnapshot {
		// Resume after the snapshot if it was installed.
		pending := p.PendingSnapshot
		p.resetState(ProgressProbe)
		p.Next = max(p.Match+1, pending+1)
		return
	}
	p.resetState(ProgressProbe)
	p.Next = p.Match + 1
}

func (p *Progress) becomeReplicate() {
	p.resetState(ProgressReplicate)
	p.Next = p.Match + 1
}

func (p *Progress) becomeSnapshot(index uint64) {
	p.resetState(ProgressSnapshot)
	p.PendingSnapshot = index
}

// maybeUpdate records that the follower holds entries up to n. It reports
// whether that was news.
func (p *Progress) maybeUpdate(n uint64) bool {
	updated := false
	if p.Match < n {
		p.Match = n
		updated = true
		p.ProbeSent = false
	}
	p.Next = max(p.Next, n+1)
	return updated
}

// maybeDecrTo handles a rejection of the append at index rejected, with the
// follower's hint. It reports false if the rejection is stale.
func (p *Progress) maybeDecrTo(rejected, hint uint64) bool {
	if p.State == ProgressReplicate {
		if rejected <= p.Match {
			return false
		}
		p.Next = p.Match + 1
		return true
	}
	if p.Next-1 != rejected {
		return false
	}
	p.Next = max(min(rejected, hint+1), p.Match+1)
	p.ProbeSent = false
	return true
}

// isPaused reports whether the leader must hold back appends.
func (p *Progress) isPaused() bool {
	switch p.State {
	case ProgressProbe:
		return p.ProbeSent
	case ProgressReplicate:
		return p.inflights.full()
	default:
		return true
	}
}

// sentEntries records an append of entries ending at last.
func (p *Progress) sentEntries(count int, last uint64) {
	switch p.State {
	case ProgressReplicate:
		if count > 0 {
			p.Next = last + 1
			p.inflights.add(last)
		}
	case ProgressProbe:
		p.ProbeSent = true
	default:
		assert.That(false, "sending entries in state %v", p.State)
	}
}

// String formats the progress for status output.
func (p *Progress) String() string {
	return fmt.Sprintf("%v match=%d next=%d", p.State, p.Match, p.Next)
}

// inflights is a bounded FIFO of the last indexes of appends in flight.
type inflights struct {
	start, count int
	buffer       []uint64
}

func newInflights(size int) inflights { return inflights{buffer: make([]uint64, size)} }

func (in *inflights) full() bool { return in.count == len(in.buffer) }

func (in *inflights) add(last uint64) {
	assert.That(!in.full(), "inflights full: %d of %d", in.count, len(in.buffer))
	in.buffer[(in.start+in.count)%len(in.buffer)] = last
	in.count++
}

// freeLE frees every append whose last index is at most to.
func (in *inflights) freeLE(to uint64) {
	for in.count > 0 && in.buffer[in.start] <= to {
		in.start = (in.start + 1) % len(in.buffer)
		in.count--
	}
}

// freeFirstOne frees the oldest append, so a follower whose responses were
// lost can be probed again.
func (in *inflights) freeFirstOne() {
	if in.count > 0 {
		in.start = (in.start + 1) % len(in.buffer)
		in.count--
	}
}

func (in *inflights) reset() { in.start, in.count = 0, 0 }

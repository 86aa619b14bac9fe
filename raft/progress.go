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
	// ProgressReplicate pipelines appends: no append with entries goes
	// while MaxInflightMsgs of them, or MaxInflightBytes of entry data,
	// are unacknowledged.
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
//
// Invariants, asserted by check after every change a method makes:
//
//   - 0 <= Match < Next: the next entry to send is past what is known to
//     match. Match is also at most the leader's last index (the core
//     asserts it; Step refuses an acknowledgement beyond it).
//   - PendingSnapshot > 0 exactly in ProgressSnapshot, and there
//     Next == max(Match, PendingSnapshot) + 1: appends resume after the
//     snapshot, or after what the follower is known to hold if that is
//     further.
//   - Appends are in flight only in ProgressReplicate, and each ends in
//     (Match, Next): acknowledged ones are freed, and Next is past every
//     one sent.
//   - ProbeSent only in ProgressProbe; emptyAppendSent only in
//     ProgressReplicate; snapshotTicks only in ProgressSnapshot.
type Progress struct {
	// Match is the highest index known to be replicated on the follower.
	Match uint64
	// Next is the index of the next entry to send. Entries in
	// (Match, Next) are in flight while replicating.
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
	// emptyAppendSent is set once a heartbeat answer got this follower
	// an empty append since the last heartbeat interval began: at most
	// one goes per follower per interval (emptyAppendDue).
	emptyAppendSent bool
	// snapshotTicks counts ticks spent in ProgressSnapshot; the leader
	// retries when a snapshot seems lost.
	snapshotTicks int
	inflights     inflights
}

func newProgress(next uint64, maxInflight int, maxInflightBytes uint64) *Progress {
	p := &Progress{Next: next, State: ProgressProbe, inflights: newInflights(maxInflight, maxInflightBytes)}
	p.check()
	return p
}

// check asserts the invariants of the type's doc.
func (p *Progress) check() {
	if p.Match >= p.Next {
		assert.Fail("progress: match %d >= next %d (%v)", p.Match, p.Next, p.State)
	}
	switch p.State {
	case ProgressProbe, ProgressReplicate:
		if p.PendingSnapshot != 0 {
			assert.Fail("progress: pending snapshot %d in state %v", p.PendingSnapshot, p.State)
		}
		if p.snapshotTicks != 0 {
			assert.Fail("progress: %d snapshot ticks in state %v", p.snapshotTicks, p.State)
		}
	case ProgressSnapshot:
		assert.That(p.PendingSnapshot > 0, "progress: no pending snapshot in state snapshot")
		if p.Next != max(p.Match, p.PendingSnapshot)+1 {
			assert.Fail("progress: next %d in state snapshot, want max(match %d, pending snapshot %d)+1", p.Next, p.Match, p.PendingSnapshot)
		}
	default:
		assert.Fail("progress: unknown state %v", p.State)
	}
	if p.ProbeSent && p.State != ProgressProbe {
		assert.Fail("progress: probe sent in state %v", p.State)
	}
	if p.emptyAppendSent && p.State != ProgressReplicate {
		assert.Fail("progress: empty append sent in state %v", p.State)
	}
	if p.inflights.count == 0 {
		return
	}
	// Appends are recorded in the order sent, each ending past the last.
	oldest, newest := p.inflights.oldest(), p.inflights.newest()
	if p.State != ProgressReplicate {
		assert.Fail("progress: %d appends in flight in state %v", p.inflights.count, p.State)
	}
	if !(p.Match < oldest && newest < p.Next) {
		assert.Fail("progress: appends in flight end in [%d, %d], outside (match %d, next %d)", oldest, newest, p.Match, p.Next)
	}
}

func (p *Progress) resetState(state ProgressState) {
	p.ProbeSent = false
	p.emptyAppendSent = false
	p.PendingSnapshot = 0
	p.snapshotTicks = 0
	p.State = state
	p.inflights.reset()
}

func (p *Progress) becomeProbe() {
	// Resume after the snapshot if one is pending (PendingSnapshot 0
	// otherwise, or when the caller learned it failed).
	pending := p.PendingSnapshot
	p.resetState(ProgressProbe)
	p.Next = max(p.Match, pending) + 1
	p.check()
}

func (p *Progress) becomeReplicate() {
	p.resetState(ProgressReplicate)
	p.Next = p.Match + 1
	p.check()
}

// becomeSnapshot waits for the follower to install the snapshot at index;
// appends resume after it.
func (p *Progress) becomeSnapshot(index uint64) {
	p.resetState(ProgressSnapshot)
	p.PendingSnapshot = index
	p.Next = max(p.Match, index) + 1
	p.check()
}

// maybeUpdate records that the follower holds entries up to n, and frees
// the appends in flight that this acknowledges. It reports whether that was
// news.
func (p *Progress) maybeUpdate(n uint64) bool {
	updated := false
	if p.Match < n {
		p.Match = n
		updated = true
		p.ProbeSent = false
	}
	p.Next = max(p.Next, n+1)
	p.inflights.freeLE(n)
	p.check()
	return updated
}

// maybeDecrTo handles a rejection of the append at index rejected, with the
// follower's hint. It reports false if the rejection is stale.
// While replicating, a fresh rejection moves the follower to Probe, from
// Match+1. While a snapshot is pending, every rejection is stale: the
// snapshot, once installed, decides where appends resume.
func (p *Progress) maybeDecrTo(rejected, hint uint64) bool {
	if p.State == ProgressSnapshot {
		return false
	}
	if p.State == ProgressReplicate {
		if rejected <= p.Match {
			return false
		}
		p.becomeProbe()
		return true
	}
	if p.Next-1 != rejected {
		return false
	}
	p.Next = max(min(rejected, hint+1), p.Match+1)
	p.ProbeSent = false
	p.check()
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

// emptyAppendDue reports whether a replicating follower that answered a
// heartbeat should get an empty append, and records that it got one. It
// should when it has appends unacknowledged (Match < lastIndex, the
// leader's) and gets no new entries: its window is full, or every entry
// was sent. The follower is alive, but an append or the acknowledgement
// that would free its window may have been lost: the empty append, at
// Next-1, makes it acknowledge what it holds, or reject (it lacks a lost
// append), and either frees the window or starts a probe that re-sends.
// No slot is freed without an acknowledgement, so the entry data in
// flight stays within the bound: heartbeat answers go ahead of a
// follower's fsync, and under read load they come many times an interval
// while its acknowledgements wait for the disk (freeing the oldest append
// at each let appends go out past the bound). At most one empty append
// goes per heartbeat interval (newHeartbeatInterval), so read rounds,
// which are heartbeat rounds, do not turn into a stream of them.
func (p *Progress) emptyAppendDue(lastIndex uint64) bool {
	if p.State != ProgressReplicate || p.Match >= lastIndex || p.emptyAppendSent {
		return false
	}
	if !p.inflights.full() && p.Next <= lastIndex {
		return false // it gets new entries instead
	}
	p.emptyAppendSent = true
	p.check()
	return true
}

// newHeartbeatInterval lets a follower be sent an empty append again
// (emptyAppendDue).
func (p *Progress) newHeartbeatInterval() { p.emptyAppendSent = false }

// sentEntries records an append of count entries ending at last, holding
// bytes of entry data.
func (p *Progress) sentEntries(count int, last, bytes uint64) {
	switch p.State {
	case ProgressReplicate:
		if count > 0 {
			p.Next = last + 1
			p.inflights.add(last, bytes)
		}
	case ProgressProbe:
		p.ProbeSent = true
	default:
		assert.Fail("sending entries in state %v", p.State)
	}
	p.check()
}

// String formats the progress for status output.
func (p *Progress) String() string {
	return fmt.Sprintf("%v match=%d next=%d", p.State, p.Match, p.Next)
}

// inflights is a bounded FIFO of the appends with entries in flight: the
// last index of each, and its bytes of entry data. It is full at maxCount
// appends, or once the bytes in flight reach maxBytes (0: no bound on
// bytes). The bytes bound is checked before a send, not against it, so one
// append always goes however large (the core caps an append at
// MaxAppendBytes but always sends at least one entry): with large entries
// the bytes in flight stay under maxBytes plus one append, whatever the
// count bound. A slot is freed only by an acknowledgement (freeLE) or a
// change of state (reset), so the bounds hold for what is really
// unacknowledged.
type inflights struct {
	start, count int
	bytes        uint64 // entry data in flight
	maxBytes     uint64
	buffer       []uint64 // last index of each append
	sizes        []uint64 // its bytes, alongside buffer
}

func newInflights(maxCount int, maxBytes uint64) inflights {
	return inflights{buffer: make([]uint64, maxCount), sizes: make([]uint64, maxCount), maxBytes: maxBytes}
}

func (in *inflights) full() bool {
	return in.count == len(in.buffer) || (in.maxBytes > 0 && in.bytes >= in.maxBytes)
}

// oldest and newest return the last indexes of the first and the latest
// append in flight; count > 0.
func (in *inflights) oldest() uint64 { return in.buffer[in.start] }
func (in *inflights) newest() uint64 {
	return in.buffer[(in.start+in.count-1)%len(in.buffer)]
}

func (in *inflights) add(last, bytes uint64) {
	if in.full() {
		assert.Fail("inflights full: %d of %d, %d of %d bytes", in.count, len(in.buffer), in.bytes, in.maxBytes)
	}
	slot := (in.start + in.count) % len(in.buffer)
	in.buffer[slot], in.sizes[slot] = last, bytes
	in.count++
	in.bytes += bytes
}

// freeLE frees every append whose last index is at most to.
func (in *inflights) freeLE(to uint64) {
	for in.count > 0 && in.buffer[in.start] <= to {
		in.bytes -= in.sizes[in.start]
		in.start = (in.start + 1) % len(in.buffer)
		in.count--
	}
}

func (in *inflights) reset() { in.start, in.count, in.bytes = 0, 0, 0 }

package server

import "sync"

// Watched names what a watch follows: a key, or (Lease set) a lease.
type Watched struct {
	Lease bool
	Name  string
}

// watchedBy returns what a command that took effect changed, if a watch
// can follow it (token commands change nothing watched).
func watchedBy(c Command) (Watched, bool) {
	switch c.Op {
	case OpPut, OpDelete:
		return Watched{Name: c.Key}, true
	case OpAcquire, OpRenew, OpRelease, OpExpire:
		return Watched{Lease: true, Name: c.Key}, true
	}
	return Watched{}, false
}

// watchIndex keeps one channel per watched key or lease, closed at the
// next change of that key or lease only: a write wakes the watches of what
// it changed, not every watch (issue 21). Watches of one key share its
// channel.
//
// A channel can also close without a change (a spurious wake, which
// watches tolerate: they look again and wait again): when the index holds
// more than its bound, it closes them all and starts afresh, so that
// watches of keys never written, whose clients went away, do not pile up.
// With a bound of at least twice the watches served at once, at least
// half of what it forgets is such garbage, and it starts afresh at most
// once per that many new keys watched.
//
// watchIndex is safe for concurrent use, under a lock of its own: a watch
// that waits again takes it, and not the state machine's, which the apply
// of every write needs. Its zero value is ready, with the least bound.
type watchIndex struct {
	mu    sync.Mutex
	chans map[Watched]chan struct{}
	// bound is the size past which the index starts afresh; 0 means
	// watchIndexMin.
	bound int
}

// watchIndexMin is the least bound of a watchIndex.
const watchIndexMin = 4096

// watchIndexBound returns the bound of an index for at most watches
// served at once.
func watchIndexBound(watches int) int { return max(watchIndexMin, 2*watches) }

// wait returns the channel closed at the next change of w.
func (x *watchIndex) wait(w Watched) <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.chans == nil {
		x.chans = map[Watched]chan struct{}{}
	}
	ch := x.chans[w]
	if ch == nil {
		if len(x.chans) >= max(x.bound, watchIndexMin) {
			x.closeAll()
			x.chans = map[Watched]chan struct{}{}
		}
		ch = make(chan struct{})
		x.chans[w] = ch
	}
	return ch
}

// changed wakes the watches of w.
func (x *watchIndex) changed(w Watched) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if ch := x.chans[w]; ch != nil {
		close(ch)
		delete(x.chans, w)
	}
}

// changedAll wakes every watch (a snapshot replaced the whole state).
func (x *watchIndex) changedAll() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.closeAll()
}

func (x *watchIndex) closeAll() {
	for w, ch := range x.chans {
		close(ch)
		delete(x.chans, w)
	}
}

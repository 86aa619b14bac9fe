package leasekit

import "coord/lease"

// Feed is the channel Backend.Watch returns, with the coalescing the
// contract allows: it buffers one value, and a value sent while the
// receiver has not taken the previous one replaces it, so that the sender
// never blocks on a slow receiver and the receiver always ends on the latest
// state.
//
// Feed is not safe for concurrent use: one goroutine, the watch loop, sends
// and closes; any goroutine receives from C.
type Feed struct {
	ch          chan lease.Record
	last        lease.Record
	lastVersion any
	sent        bool
}

// NewFeed returns an empty Feed.
func NewFeed() *Feed { return &Feed{ch: make(chan lease.Record, 1)} }

// C returns the receiving end.
func (f *Feed) C() <-chan lease.Record { return f.ch }

// Send offers r to the receiver, replacing a value it has not taken yet.
// version is a comparable value that identifies the store's state of the
// record beyond holder and token (the expiry the store holds, a
// modification revision); Send does nothing when holder, token and version
// all equal the last ones sent, so that a poll that finds nothing new wakes
// nobody. Record.Expiry is not compared: it is computed on the caller's
// clock and differs on every read.
func (f *Feed) Send(r lease.Record, version any) {
	if f.sent && f.last.Holder == r.Holder && f.last.Token == r.Token && f.lastVersion == version {
		return
	}
	f.sent, f.last, f.lastVersion = true, r, version
	for {
		select {
		case f.ch <- r:
			return
		default:
		}
		select {
		case <-f.ch: // drop the stale value the receiver has not taken
		default:
		}
	}
}

// Close closes the receiving end; the watch is over.
func (f *Feed) Close() { close(f.ch) }

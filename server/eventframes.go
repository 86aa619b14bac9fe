package server

import "sync"

// eventFrames shares the encoded event of a watched key at a revision
// among the streams that watch that key: when 1,000 streams watch one key,
// each change is read and encoded once rather than 1,000 times (issue 21;
// the leader spent a quarter of its CPU in the watch streams). Only key
// events are shared: a lease's event carries the time left, which is read
// when the event is made.
//
// An event is the key's state when the first stream made it, as each
// stream's own read would be: a state at or after the revision that woke
// it. A revision names one change of the whole store, so an event made
// for it never describes another change.
//
// eventFrames is safe for concurrent use; its zero value is ready, and a
// nil one shares nothing.
type eventFrames struct {
	mu     sync.Mutex
	frames map[Watched]eventFrame
}

type eventFrame struct {
	revision uint64
	frame    []byte
}

// eventFramesMax bounds the keys whose last event is kept: past it, the
// cache starts afresh (the streams of a forgotten key encode its next
// event again, once).
const eventFramesMax = 4096

// get returns the event of what at revision, if a stream made it.
func (f *eventFrames) get(what Watched, revision uint64) ([]byte, bool) {
	if f == nil || what.Lease {
		return nil, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.frames[what]
	if !ok || e.revision != revision {
		return nil, false
	}
	return e.frame, true
}

// put keeps the event of what at revision for the other streams of what.
// The frame must not change afterwards: the streams write it as it is.
func (f *eventFrames) put(what Watched, revision uint64, frame []byte) {
	if f == nil || what.Lease {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frames == nil || len(f.frames) >= eventFramesMax {
		f.frames = map[Watched]eventFrame{}
	}
	if e, ok := f.frames[what]; ok && e.revision > revision {
		return // a later event is kept already
	}
	f.frames[what] = eventFrame{revision: revision, frame: frame}
}

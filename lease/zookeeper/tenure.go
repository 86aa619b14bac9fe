package zookeeper

import (
	"context"
	"errors"
	"sync"
	"time"
)

// tenure is one acquisition by this Backend: the session its ephemeral
// node lives in, and the holder's side of the TTL.
//
// The zk client pings the server on its own while its process lives, so a
// session outlives a holder that is alive but no longer renews (a stuck
// Elector, a long GC of one goroutine): the server cannot tell. The
// contract wants the lease gone at the TTL after the last renewal, so the
// tenure keeps a deadline of its own, the send time of its last successful
// Acquire or Renew plus the granted timeout, and closes the session when it
// passes (the server then deletes the node at once). A process that is
// stopped or cut off stops pinging too, and the server expires the session
// after the same timeout. Either way the lease ends no earlier than the
// deadline, and no later than the deadline or the last server contact plus
// the timeout.
//
// tenure is safe for concurrent use: Renew and Release take ops (one at a
// time, waiting no longer than their context), and the deadline's timer
// runs on a goroutine of its own under mu.
type tenure struct {
	name, holder string
	token        uint64

	ops chan struct{} // a one-slot lock that a context can give up on

	mu       sync.Mutex
	sess     *session // nil once ended
	owner    int64    // the session id that owns the node
	czxid    int64    // the node's czxid: token, or a later one after a rebind
	deadline time.Time
	timer    *time.Timer
	gen      uint64 // which timer is current
	ended    error  // why the tenure ended; nil while it lasts
	closer   func(*session)
}

// Reasons a tenure ends; Renew and Release report them wrapped in
// lease.ErrLost.
var (
	errNotRenewed     = errors.New("not renewed within its TTL: this Backend closed its session")
	errReleased       = errors.New("released")
	errGone           = errors.New("the node is no longer this tenure's")
	errSessionExpired = errors.New("its session expired on the server")
	errClosed         = errors.New("the Backend was closed")
)

func newTenure(name, holder string, token uint64, sess *session, owner, czxid int64, closer func(*session)) *tenure {
	return &tenure{name: name, holder: holder, token: token, ops: make(chan struct{}, 1),
		sess: sess, owner: owner, czxid: czxid, closer: closer}
}

// lock takes the tenure for one operation, or returns ctx's error.
func (t *tenure) lock(ctx context.Context) error {
	select {
	case t.ops <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *tenure) unlock() { <-t.ops }

// current returns the tenure's session and node, or why it ended. A
// deadline that has passed ends it now, even if its timer has not fired
// yet.
func (t *tenure) current() (*session, int64, int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended == nil && !time.Now().Before(t.deadline) {
		t.endLocked(errNotRenewed)
	}
	return t.sess, t.owner, t.czxid, t.ended
}

// extend moves the deadline to sent + the granted timeout, unless the
// tenure ended meanwhile or its deadline passed while the renewal was in
// flight: then it ends the tenure (if not ended) and returns why.
func (t *tenure) extend(sent time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended == nil && !t.deadline.IsZero() && !time.Now().Before(t.deadline) {
		t.endLocked(errNotRenewed)
	}
	if t.ended != nil {
		return t.ended
	}
	t.deadline = sent.Add(t.sess.granted())
	if t.timer != nil {
		t.timer.Stop()
	}
	t.gen++
	gen := t.gen
	t.timer = time.AfterFunc(time.Until(t.deadline), func() { t.expire(gen) })
	return nil
}

// expire is the deadline's timer: it ends the tenure unless a renewal
// replaced the timer.
func (t *tenure) expire(gen uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gen == gen && t.ended == nil {
		t.endLocked(errNotRenewed)
	}
}

// rebound moves the tenure to the session sess, where its node now has
// czxid, and returns the session it leaves (for the caller to close).
func (t *tenure) rebound(sess *session, owner, czxid int64) *session {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.sess
	t.sess, t.owner, t.czxid = sess, owner, czxid
	return old
}

// end ends the tenure for why, if it has not ended, and closes its
// session.
func (t *tenure) end(why error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended == nil {
		t.endLocked(why)
	}
}

// finish ends the tenure for why, if it has not ended, and returns its
// session for the caller to close, or nil.
func (t *tenure) finish(why error) *session {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended != nil {
		return nil
	}
	sess := t.sess
	t.sess = nil
	t.endLocked(why)
	return sess
}

// endLocked ends the tenure; t.mu is held. The session, if the tenure
// still has it, is closed by the closer, which does not block.
func (t *tenure) endLocked(why error) {
	t.ended = why
	if t.timer != nil {
		t.timer.Stop()
	}
	t.gen++
	if t.sess != nil {
		t.closer(t.sess)
		t.sess = nil
	}
}

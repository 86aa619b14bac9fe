package fence

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrStaleToken means a Resource rejected a write whose fencing token
// is lower than one it has already accepted.
var ErrStaleToken = errors.New("fence: stale fencing token")

// Write is one write attempt recorded by a Resource.
type Write struct {
	Token    uint64
	Holder   string
	At       time.Time // when the resource received it
	Accepted bool
}

// Resource is a resource protected by fencing tokens, in the way
// Kleppmann describes ("How to do distributed locking"): it remembers the
// highest token it has accepted and rejects any write with a lower one, so
// that a leader paused past its lease cannot clobber its successor's work.
// It records every attempt, so that a checker can inspect the history.
//
// A Resource is safe for concurrent use. Its zero value is ready.
type Resource struct {
	mu      sync.Mutex
	highest uint64
	writes  []Write
}

// maxWrites bounds the recorded history (memory is finite; a run that
// writes more keeps its first maxWrites attempts).
const maxWrites = 1 << 20

// Write attempts a write with token on behalf of holder. It returns an error
// wrapping ErrStaleToken, and changes nothing, when token is lower than the
// highest token already accepted.
func (r *Resource) Write(token uint64, holder string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := Write{Token: token, Holder: holder, At: time.Now(), Accepted: token >= r.highest}
	if len(r.writes) < maxWrites {
		r.writes = append(r.writes, w)
	}
	if !w.Accepted {
		return fmt.Errorf("%w: token %d from %q, highest accepted %d", ErrStaleToken, token, holder, r.highest)
	}
	r.highest = token
	return nil
}

// Highest returns the highest token accepted so far.
func (r *Resource) Highest() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest
}

// Writes returns a copy of the recorded attempts, in arrival order.
func (r *Resource) Writes() []Write {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Write(nil), r.writes...)
}

// Check verifies the history: no accepted write carries a token lower than
// one accepted before it, and each token was used by one holder only (two
// holders writing under one token means the store issued it twice). It
// returns one error per violation.
func (r *Resource) Check() []error {
	var errs []error
	var highest uint64
	owner := map[uint64]string{}
	for i, w := range r.Writes() {
		if !w.Accepted {
			continue
		}
		if w.Token < highest {
			errs = append(errs, fmt.Errorf("write %d accepted with token %d after token %d", i, w.Token, highest))
		}
		highest = max(highest, w.Token)
		if h, ok := owner[w.Token]; ok && h != w.Holder {
			errs = append(errs, fmt.Errorf("token %d used by two holders: %q and %q", w.Token, h, w.Holder))
		}
		owner[w.Token] = w.Holder
	}
	return errs
}

package lease

import (
	"context"
	"errors"
	"time"
)

// Errors returned by backends and the Elector. Backends wrap them with
// context (fmt.Errorf("lease/redis: renew %q: %w", name, ErrLost)); callers
// test with errors.Is.
var (
	// ErrHeld means Acquire found the lease held, unexpired, by a live holder.
	// The Record returned beside it says who holds it.
	ErrHeld = errors.New("lease: held by another holder")

	// ErrLost means Renew or Release presented a token that is no longer the
	// current one: the lease expired and was taken over (or released). The
	// caller must stop acting as the holder at once.
	ErrLost = errors.New("lease: lost (token is not current)")

	// ErrUnavailable means the store could not be reached or did not answer
	// in time. The outcome of the operation is unknown; an Elector that
	// cannot renew before its renew deadline steps down.
	ErrUnavailable = errors.New("lease: store unavailable")

	// ErrCorrupt means the store held a record that could not be decoded. A
	// backend repairs what it can (and logs the repair); it returns ErrCorrupt
	// only when it cannot repair without risking a second holder.
	ErrCorrupt = errors.New("lease: corrupt record")

	// ErrClosed means the Backend was closed.
	ErrClosed = errors.New("lease: backend closed")

	// ErrInvalid means the arguments were invalid: an empty name or holder, a
	// non-positive TTL, a zero token.
	ErrInvalid = errors.New("lease: invalid argument")

	// ErrUnrepairable means the store is in a state this process cannot
	// repair and will not leave by waiting: a lock file it may not replace
	// (owned by another user in a sticky directory, immutable), a record it
	// may not read, a read-only file system. The error names the file and
	// the reason. An Elector gives up after a few attempts
	// (Elector.Run returns the error) instead of retrying forever.
	ErrUnrepairable = errors.New("lease: store needs an operator")
)

// Record is a lease as its store holds it.
type Record struct {
	// Name identifies the lease within the store.
	Name string

	// Holder is the current holder's identity, or "" when the lease is free
	// (never taken, released, or expired and observed as such).
	Holder string

	// Token is the fencing token of Holder's tenure. Every successful
	// Acquire of a name issues a token greater than every token issued
	// before for that name, across holders, crashes and restarts of the
	// store's clients. Renew keeps the token. When the lease is free, Token
	// is the last token issued (0 if none), or 0 if the store cannot tell.
	Token uint64

	// Expiry is when the lease expires, on the caller's clock: the time the
	// request was sent plus the time to live the store granted or reported.
	// Because it is measured from before the store acted, it is never later
	// than the store's own expiry (clock rate drift aside). Zero when free.
	// It is advisory: only the store decides whether a lease has expired.
	Expiry time.Time
}

// Free reports whether nobody holds the lease.
func (r Record) Free() bool { return r.Holder == "" }

// Backend is a store of lease records. Every operation is one atomic
// compare-and-swap in the store: no sequence of calls from any number of
// processes can leave two holders of a name at once, or an empty or partial
// record observable.
//
// Implementations are safe for concurrent use by multiple goroutines.
type Backend interface {
	// Acquire makes holder the holder of name for ttl, if the lease is free,
	// expired, or held by a holder the store knows to be dead. It issues a
	// new fencing token, greater than any issued before for name.
	//
	// If the lease is held by anyone else (or by holder itself under an
	// earlier token), Acquire returns the current Record and an error
	// wrapping ErrHeld.
	Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Record, error)

	// Renew extends holder's lease to ttl from now, only if token is still
	// the current token of name and the lease has not expired. Otherwise it
	// returns the current Record and an error wrapping ErrLost, and changes
	// nothing: a stale holder never overwrites a new holder's lease.
	Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (Record, error)

	// Release frees the lease at once, only if token is still the current
	// token of name; otherwise it changes nothing and returns an error
	// wrapping ErrLost. Releasing frees the name for the next Acquire without
	// waiting for the TTL; the next token is still greater.
	Release(ctx context.Context, name, holder string, token uint64) error

	// Get returns the current record of name. A lease never taken, released
	// or expired is returned as a free Record, without error.
	Get(ctx context.Context, name string) (Record, error)

	// Watch returns a channel that receives the record of name after every
	// change the store can see: acquire, renew, release, expiry, and (where
	// the store can tell) the death of the holder. The first value is the
	// current record. Values may be coalesced: a receiver is guaranteed to
	// see the latest state, not every intermediate one. Stores that can push
	// (etcd watches, Redis pub/sub, PostgreSQL LISTEN, inotify) push; stores
	// that cannot, poll with jitter and say so in their package doc.
	//
	// The channel is closed when ctx is done, when the Backend is closed, or
	// when the watch fails; a caller that still cares calls Watch again.
	Watch(ctx context.Context, name string) (<-chan Record, error)

	// Close releases the Backend's resources (connections, file handles,
	// liveness locks). It does not release leases: a holder that closes its
	// Backend without Release is, to others, a holder that died. Operations
	// after Close return ErrClosed.
	Close() error
}

// TenureWatcher is implemented by Backends that can tell a holder at once
// that its tenure is over, without waiting for its next renewal: the file
// backend does when its directory is replaced or its record files are
// removed or overwritten. The Elector uses it, when its Backend has it, to
// step down at once.
type TenureWatcher interface {
	// WatchTenure returns a channel that receives one error, wrapping
	// ErrLost and saying why, as soon as the store no longer shows the
	// tenure of token on name as current, for any reason other than this
	// Backend's own Release. The channel is closed without a value when
	// ctx is done, when the tenure ends through this Backend (Release,
	// Renew finding it lost), or when the Backend is closed.
	WatchTenure(ctx context.Context, name string, token uint64) (<-chan error, error)
}

package raftlease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"coord/client"
	"coord/lease"
)

// tenureKey names one tenure of a lease.
type tenureKey struct {
	name  string
	token uint64
}

// tenures is what a Backend remembers of the tenures it acquired: the
// holder (a session names it) and the session watch to end when the
// tenure ends through this Backend.
//
// tenures is safe for concurrent use.
type tenures struct {
	mu      sync.Mutex
	holders map[tenureKey]string
	watches map[tenureKey]context.CancelFunc
}

// acquired notes that holder holds k.
func (t *tenures) acquired(k tenureKey, holder string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.holders == nil {
		t.holders, t.watches = map[tenureKey]string{}, map[tenureKey]context.CancelFunc{}
	}
	t.holders[k] = holder
}

// ended forgets k, ending its session watch without a value: the tenure
// ended through this Backend (Release, or Renew finding it lost).
func (t *tenures) ended(k tenureKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cancel := t.watches[k]; cancel != nil {
		cancel()
	}
	delete(t.watches, k)
	delete(t.holders, k)
}

// watch registers the session watch of k and returns its holder; false if
// this Backend did not acquire k, or already watches it.
func (t *tenures) watch(k tenureKey, cancel context.CancelFunc) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	holder, ok := t.holders[k]
	if !ok || t.watches[k] != nil {
		return "", false
	}
	t.watches[k] = cancel
	return holder, true
}

// unwatch forgets the session watch of k, once it returned.
func (t *tenures) unwatch(k tenureKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.watches, k)
}

// errNoSession is WatchTenure's error on a Backend opened without
// sessions: the tenure is watched by renewals alone.
var errNoSession = fmt.Errorf("%s: %w: sessions are off (raft://...?session=true turns them on)", prefix, lease.ErrInvalid)

// WatchTenure implements lease.TenureWatcher with a session stream
// (Options.Session): it keeps one open to the leader for the tenure of
// token, and sends an error wrapping lease.ErrLost when the holder must
// stop at once:
//
//   - the leader ended the stream because the token is no longer current;
//   - the stream was lost (closed, reset, or silent) and no new one opened
//     within half the leader's grace of the last event received. The
//     leader frees the lease a whole grace after it sees the stream close,
//     so the holder has stopped by then (the package doc, "Sessions").
//
// A stream the leader ended because it stopped leading promises no release:
// the watch opens one on the new leader, and until it has, the tenure is
// kept by renewals alone, as without sessions. So is a tenure whose first
// stream has not opened yet.
//
// The session closes when ctx is done: a holder closes it only once it has
// stopped acting as the holder (lease.Elector does so after its work has
// returned).
func (b *Backend) WatchTenure(ctx context.Context, name string, token uint64) (<-chan error, error) {
	if !b.session {
		return nil, errNoSession
	}
	if err := b.life.Check(prefix); err != nil {
		return nil, err
	}
	k := tenureKey{name, token}
	wctx, cancel := context.WithCancel(ctx)
	holder, ok := b.tenures.watch(k, cancel)
	if !ok {
		cancel()
		return nil, fmt.Errorf("%s: %w: watch tenure %q token %d: not acquired through this Backend, or watched already",
			prefix, lease.ErrInvalid, name, token)
	}
	out := make(chan error, 1)
	err := b.life.Go(wctx, prefix, func(ctx context.Context) {
		defer close(out)
		defer b.tenures.unwatch(k)
		defer cancel()
		if err := b.keepSession(ctx, k, holder); err != nil {
			out <- err
		}
	})
	if err != nil {
		cancel()
		b.tenures.unwatch(k)
		return nil, err
	}
	return out, nil
}

// sessionRetry is the wait between attempts to open a session while no
// deadline presses.
const sessionRetry = 200 * time.Millisecond

// keepSession keeps a session of tenure k open until ctx is done (nil) or
// the tenure must end (an error wrapping lease.ErrLost).
func (b *Backend) keepSession(ctx context.Context, k tenureKey, holder string) error {
	// deadline is when the holder must have stopped unless an event
	// arrives: zero while no leader may free the lease for a session's end.
	var deadline time.Time
	for ctx.Err() == nil {
		s, err := b.openSession(ctx, k, holder, deadline)
		switch {
		case errors.Is(err, client.ErrLost):
			return fmt.Errorf("%s: session %q token %d: %w: %v", prefix, k.name, k.token, lease.ErrLost, err)
		case err != nil && !deadline.IsZero() && !time.Now().Before(deadline):
			return fmt.Errorf("%s: session %q token %d: %w: stream lost and not reopened within its bound: %v",
				prefix, k.name, k.token, lease.ErrLost, err)
		case errors.Is(err, client.ErrInvalid), errors.Is(err, client.ErrPermissionDenied), errors.Is(err, client.ErrUnauthenticated),
			errors.Is(err, client.ErrMalformedSession):
			// The cluster will answer the same again. The tenure goes on
			// by renewals; if a session was open, its deadline still ends it.
			if deadline.IsZero() {
				return nil
			}
			sleep(ctx, deadline.Sub(time.Now()))
			continue
		case err != nil:
			sleep(ctx, sessionRetry)
			continue
		}
		bound := s.Grace / 2
		deadline = time.Now().Add(bound)
		deadline, err = b.followSession(ctx, s, k, deadline, bound)
		if err != nil {
			return err
		}
	}
	return nil
}

// openSession opens one session stream, bounded by deadline if set.
func (b *Backend) openSession(ctx context.Context, k tenureKey, holder string, deadline time.Time) (*client.LeaseSession, error) {
	octx, cancel := context.WithTimeout(ctx, b.timeout)
	if !deadline.IsZero() {
		octx, cancel = context.WithDeadline(ctx, deadline)
	}
	defer cancel()
	s, err := b.c.OpenLeaseSession(octx, k.name, holder, k.token)
	if err == nil && ctx.Err() != nil {
		s.Close()
		return nil, ctx.Err()
	}
	return s, err
}

// followSession reads s until it ends, moving the deadline bound past each
// event. It returns the deadline to reopen within (zero if the leader
// promised no release), or an error wrapping lease.ErrLost.
func (b *Backend) followSession(ctx context.Context, s *client.LeaseSession, k tenureKey, deadline time.Time, bound time.Duration) (time.Time, error) {
	defer s.Close()
	events := make(chan error, 1)
	go func() {
		for {
			err := s.Next()
			select {
			case events <- err:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return deadline, nil
		case <-timer.C:
			return deadline, fmt.Errorf("%s: session %q token %d: %w: no event from the leader within %v",
				prefix, k.name, k.token, lease.ErrLost, bound)
		case err := <-events:
			switch {
			case err == nil:
				deadline = time.Now().Add(bound)
				timer.Reset(time.Until(deadline))
				continue
			case errors.Is(err, client.ErrLost):
				return deadline, fmt.Errorf("%s: session %q token %d: %w: %v", prefix, k.name, k.token, lease.ErrLost, err)
			case errors.Is(err, client.ErrSessionEnded):
				// The leader stopped leading, and will not free the lease
				// for this stream's end.
				return time.Time{}, nil
			default:
				return deadline, nil // lost: reopen within the deadline
			}
		}
	}
}

// sleep waits for d or ctx.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

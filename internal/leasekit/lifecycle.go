package leasekit

import (
	"context"
	"fmt"
	"sync"

	"coord/lease"
)

// Lifecycle is a Backend's open-or-closed state and the goroutines its
// watches run on: operations check it (Check), watches start on it (Go),
// and Backend.Close ends them all and waits for them (Close) before it
// releases the connections they use. The zero value is open.
//
// Lifecycle is safe for concurrent use.
type Lifecycle struct {
	mu     sync.Mutex
	closed bool
	// stop is done once Close is called: it cancels every watch's context.
	// Made by the first Go or Close, so that the zero value works.
	stop   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Check returns an error wrapping lease.ErrClosed, prefixed with prefix
// ("lease/redis"), once Close has been called.
func (l *Lifecycle) Check(prefix string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return closedError(prefix)
	}
	return nil
}

// Go runs watch on a goroutine of its own, with a context that is done
// when ctx is or when Close is called; Close waits for watch to return. If
// Close has been called already, Go does not run watch and returns an
// error wrapping lease.ErrClosed: the caller releases what it had made for
// the watch.
func (l *Lifecycle) Go(ctx context.Context, prefix string, watch func(ctx context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return closedError(prefix)
	}
	l.init()
	wctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(l.stop, cancel)
	// Added under mu, before Close can set closed: Close's Wait never
	// races with an Add.
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer unhook()
		defer cancel()
		watch(wctx)
	}()
	return nil
}

// Close marks the Lifecycle closed, cancels every watch's context, and
// waits for the watches to return. It reports whether this call closed it:
// false means Close was called before, and the caller has nothing left to
// release.
func (l *Lifecycle) Close() bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	l.closed = true
	l.init()
	l.cancel()
	l.mu.Unlock()
	l.wg.Wait()
	return true
}

// init makes stop; l.mu is held.
func (l *Lifecycle) init() {
	if l.stop == nil {
		l.stop, l.cancel = context.WithCancel(context.Background())
	}
}

func closedError(prefix string) error { return fmt.Errorf("%s: %w", prefix, lease.ErrClosed) }

package leasetest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"coord/lease"
)

// Faulty wraps a Backend and breaks it on purpose: renewals can hang until
// their context ends, or fail as if the store were unreachable. It tests
// how an Elector behaves when its store misbehaves. Safe for concurrent
// use.
type Faulty struct {
	lease.Backend

	mu          sync.Mutex
	hangRenew   bool
	failRenew   bool
	renewCalled chan struct{} // signalled on each faulty renewal
}

// NewFaulty returns b wrapped, with no faults switched on.
func NewFaulty(b lease.Backend) *Faulty {
	return &Faulty{Backend: b, renewCalled: make(chan struct{}, 1)}
}

// HangRenewals makes every Renew block until its context ends (a store that
// stopped answering), or, with false, behave again.
func (f *Faulty) HangRenewals(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hangRenew = on
}

// FailRenewals makes every Renew fail with ErrUnavailable at once, or, with
// false, behave again.
func (f *Faulty) FailRenewals(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failRenew = on
}

// FaultyRenewals is signalled (capacity 1, coalesced) whenever a Renew hit
// a fault.
func (f *Faulty) FaultyRenewals() <-chan struct{} { return f.renewCalled }

// Renew implements lease.Backend, with the faults switched on.
func (f *Faulty) Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (lease.Record, error) {
	f.mu.Lock()
	hang, fail := f.hangRenew, f.failRenew
	f.mu.Unlock()
	if hang || fail {
		select {
		case f.renewCalled <- struct{}{}:
		default:
		}
	}
	switch {
	case hang:
		<-ctx.Done()
		return lease.Record{}, fmt.Errorf("leasetest: renew hung: %w: %v", lease.ErrUnavailable, ctx.Err())
	case fail:
		return lease.Record{}, fmt.Errorf("leasetest: renew: %w", lease.ErrUnavailable)
	}
	return f.Backend.Renew(ctx, name, holder, token, ttl)
}

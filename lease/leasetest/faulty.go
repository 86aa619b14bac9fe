package leasetest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"coord/lease"
)

// Faulty wraps a Backend and breaks it on purpose: renewals can hang until
// their context ends, fail as if the store were unreachable, or succeed in
// the store with their answer held back past their deadline. It tests how
// an Elector behaves when its store misbehaves. Safe for concurrent use.
type Faulty struct {
	lease.Backend

	mu          sync.Mutex
	hangRenew   bool
	failRenew   bool
	hold        chan struct{} // non-nil while answers are held; closed to let them go
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

// HoldRenewalAnswers makes every Renew reach the store (which renews the
// lease, or not, as it would) and then hold its answer, whatever its
// context says, until HoldRenewalAnswers(false) lets every held answer go:
// a process paused between the store's answer and its handling of it (the
// SIGSTOP that once made a leader report a renewal after its successor's
// election). The answer goes out unchanged, however late.
func (f *Faulty) HoldRenewalAnswers(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case on && f.hold == nil:
		f.hold = make(chan struct{})
	case !on && f.hold != nil:
		close(f.hold)
		f.hold = nil
	}
}

// FaultyRenewals is signalled (capacity 1, coalesced) whenever a Renew hit
// a fault.
func (f *Faulty) FaultyRenewals() <-chan struct{} { return f.renewCalled }

// Renew implements lease.Backend, with the faults switched on.
func (f *Faulty) Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (lease.Record, error) {
	f.mu.Lock()
	hang, fail, hold := f.hangRenew, f.failRenew, f.hold
	f.mu.Unlock()
	if hold != nil {
		rec, err := f.Backend.Renew(ctx, name, holder, token, ttl)
		f.signal()
		<-hold
		return rec, err
	}
	if hang || fail {
		f.signal()
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

func (f *Faulty) signal() {
	select {
	case f.renewCalled <- struct{}{}:
	default:
	}
}

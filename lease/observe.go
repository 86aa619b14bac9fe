package lease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ChangeKind says how a lease record changed, as an observer sees it.
type ChangeKind string

// The kinds of Change.
const (
	// ChangeCurrent is the first record an observer sees, and the first
	// after a watch was made again: the state as it is.
	ChangeCurrent ChangeKind = "current"
	// ChangeAcquired: a holder took the lease (a new token).
	ChangeAcquired ChangeKind = "acquired"
	// ChangeRenewed: the same holder and token, a new expiry.
	ChangeRenewed ChangeKind = "renewed"
	// ChangeFreed: the lease became free (released, expired, or its
	// holder died, as the store tells).
	ChangeFreed ChangeKind = "freed"
)

// Change is one change of a lease record that Observe saw.
type Change struct {
	Kind ChangeKind
	// Record is the record now; Previous the one before it (zero for
	// ChangeCurrent).
	Record, Previous Record
}

// observeRetryMin and observeRetryMax bound the wait before watching again
// after a watch failed.
const (
	observeRetryMin = 100 * time.Millisecond
	observeRetryMax = 2 * time.Second
)

// Observe follows the lease name in b without taking part: it never calls
// Acquire, Renew or Release, only Watch (whose first value is the current
// record, from Get). It calls onChange for the first record and for every
// change after it, and onError, if not nil, when a watch fails; then it
// watches again, waiting longer after each failure in a row (100 ms to
// 2 s), and starts again with a ChangeCurrent. It returns nil when ctx is
// done, and an error if b is closed or the arguments are invalid.
//
// Watches may coalesce: a change that was overtaken before the observer
// read it is not seen, only the state after it (Backend.Watch). Both
// callbacks run on Observe's goroutine, in order.
func Observe(ctx context.Context, b Backend, name string, onChange func(Change), onError func(error)) error {
	if name == "" {
		return fmt.Errorf("%w: observe: empty lease name", ErrInvalid)
	}
	retry := observeRetryMin
	for {
		ch, err := b.Watch(ctx, name)
		if err == nil {
			var last Record
			first := true
			for r := range ch {
				onChange(classify(first, last, r))
				first, last = false, r
				retry = observeRetryMin
			}
			err = errors.New("lease: observe: the watch ended")
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrClosed), errors.Is(err, ErrInvalid):
			return err
		}
		if onError != nil {
			onError(err)
		}
		select {
		case <-time.After(retry):
		case <-ctx.Done():
			return nil
		}
		retry = min(2*retry, observeRetryMax)
	}
}

func classify(first bool, last, r Record) Change {
	c := Change{Record: r, Previous: last}
	switch {
	case first:
		c.Kind, c.Previous = ChangeCurrent, Record{}
	case r.Free():
		c.Kind = ChangeFreed
	case r.Holder == last.Holder && r.Token == last.Token:
		c.Kind = ChangeRenewed
	default:
		c.Kind = ChangeAcquired
	}
	return c
}

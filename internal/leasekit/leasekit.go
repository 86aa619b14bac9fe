package leasekit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"coord/lease"
)

// TimeoutDefault bounds a store round trip whose context has no deadline of
// its own. A backend must answer, or say it cannot, well before any sensible
// TTL runs out: a call that hangs forever on a blackholed connection would
// keep an Elector believing it still leads.
const TimeoutDefault = 5 * time.Second

// CheckAcquire returns an error wrapping lease.ErrInvalid, prefixed with
// prefix ("lease/redis"), if name or holder is empty or ttl is not positive.
func CheckAcquire(prefix, name, holder string, ttl time.Duration) error {
	if err := CheckName(prefix, name); err != nil {
		return err
	}
	if holder == "" {
		return fmt.Errorf("%s: lease %q: %w: empty holder", prefix, name, lease.ErrInvalid)
	}
	if ttl <= 0 {
		return fmt.Errorf("%s: lease %q: %w: ttl %v is not positive", prefix, name, lease.ErrInvalid, ttl)
	}
	return nil
}

// CheckToken is CheckAcquire for Renew and Release: it also rejects a zero
// token, which no Acquire ever issues. Release passes a ttl of 1ns.
func CheckToken(prefix, name, holder string, token uint64, ttl time.Duration) error {
	if err := CheckAcquire(prefix, name, holder, ttl); err != nil {
		return err
	}
	if token == 0 {
		return fmt.Errorf("%s: lease %q: %w: zero token", prefix, name, lease.ErrInvalid)
	}
	return nil
}

// CheckName returns an error wrapping lease.ErrInvalid if name is empty.
func CheckName(prefix, name string) error {
	if name == "" {
		return fmt.Errorf("%s: %w: empty lease name", prefix, lease.ErrInvalid)
	}
	return nil
}

// Bound returns ctx with a deadline of at most timeout from now, when ctx
// has no earlier one. A zero timeout means TimeoutDefault.
func Bound(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		timeout = TimeoutDefault
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= timeout {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, timeout)
}

// Unavailable wraps err, a failure to reach the store or to hear back from
// it in time, so that it matches both lease.ErrUnavailable and err itself
// (context.DeadlineExceeded, say):
//
//	lease/redis: renew "leader": lease: store unavailable: dial tcp ...: connection refused
func Unavailable(prefix, op, name string, err error) error {
	if errors.Is(err, lease.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%s: %s %q: %w: %w", prefix, op, name, lease.ErrUnavailable, err)
}

// Jitter returns d plus a random fraction of up to frac of d, so that many
// watchers polling or waking at the same expiry do not all hit the store in
// the same millisecond.
func Jitter(d time.Duration, frac float64) time.Duration {
	if d <= 0 || frac <= 0 {
		return d
	}
	return d + time.Duration(rand.Float64()*frac*float64(d))
}

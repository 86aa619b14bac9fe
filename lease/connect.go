package lease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ConnectConfig says how Connect waits for a store that does not answer.
// The zero value waits forever, retrying after 250 ms, then twice as long
// each time up to 5 s.
type ConnectConfig struct {
	// Timeout bounds the whole wait, attempts included; 0 waits until the
	// context is done.
	Timeout time.Duration
	// RetryPeriod is the wait after the first failed attempt; each later
	// wait doubles, up to RetryPeriodMax. Zero values mean 250 ms and 5 s.
	RetryPeriod    time.Duration
	RetryPeriodMax time.Duration
	// AttemptTimeout bounds each attempt, so that a store whose client
	// retries inside one call still fails an attempt, and OnRetry says
	// so, at least this often. Zero means 5 s.
	AttemptTimeout time.Duration
	// Clock is the source of time; nil means the system clock.
	Clock Clock
	// OnRetry, if set, is called after each failed attempt that will be
	// retried, with the attempt's number (from 1), its error and the wait
	// before the next one, so that a caller can say why it waits.
	OnRetry func(attempt int, err error, wait time.Duration)
}

// UnreachableError is Connect's error when the store did not answer within
// ConnectConfig.Timeout. It wraps the last attempt's error, which wraps
// ErrUnavailable.
type UnreachableError struct {
	Attempts int           // attempts made
	Waited   time.Duration // from the first attempt to giving up
	Last     error         // the last attempt's error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("lease: store did not answer in %v (%s): %v", e.Waited.Round(time.Millisecond), e.AttemptsString(), e.Last)
}

// AttemptsString says how many attempts were made: "1 attempt", "3 attempts".
func (e *UnreachableError) AttemptsString() string {
	if e.Attempts == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", e.Attempts)
}

func (e *UnreachableError) Unwrap() error { return e.Last }

// Connect returns a Backend once the store answers: it calls open, then
// probe on the Backend open returned (a Get of the lease, say), and
// retries both while they fail with errors wrapping ErrUnavailable, after
// a wait that grows, until cfg.Timeout passes (an *UnreachableError) or ctx
// is done (ctx's error, wrapping the last attempt's). Any other error is
// returned at once: waiting mends an unreachable store, not a bad URL, a
// refused password or a directory that does not exist. Each attempt gets
// what is left of the timeout as its deadline; a Backend whose probe failed
// is closed before the next attempt.
//
// Stores differ in when they first talk to their server: Redis and
// PostgreSQL dial in Open, a coord cluster only on the first request. A
// probe makes them all answer before the caller relies on them, so that an
// unreachable store is reported the same way whatever its kind.
func Connect(ctx context.Context, open func(context.Context) (Backend, error), probe func(context.Context, Backend) error, cfg ConnectConfig) (Backend, error) {
	clock := cfg.Clock
	if clock == nil {
		clock = systemClock{}
	}
	wait := cfg.RetryPeriod
	if wait <= 0 {
		wait = 250 * time.Millisecond
	}
	waitMax := max(cfg.RetryPeriodMax, wait)
	if cfg.RetryPeriodMax <= 0 {
		waitMax = max(5*time.Second, wait)
	}
	attemptMax := cfg.AttemptTimeout
	if attemptMax <= 0 {
		attemptMax = 5 * time.Second
	}
	start := clock.Now()
	for attempt := 1; ; attempt++ {
		bound := attemptMax
		if cfg.Timeout > 0 {
			bound = min(bound, cfg.Timeout-clock.Now().Sub(start))
		}
		b, err := connectOnce(ctx, open, probe, bound)
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		}
		waited := clock.Now().Sub(start)
		if cfg.Timeout > 0 {
			if left := cfg.Timeout - waited; left <= 0 {
				return nil, &UnreachableError{Attempts: attempt, Waited: waited, Last: err}
			} else if wait > left {
				wait = left
			}
		}
		if cfg.OnRetry != nil {
			cfg.OnRetry(attempt, err, wait)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		case <-clock.After(wait):
		}
		wait = min(2*wait, waitMax)
	}
}

// connectOnce makes one attempt of Connect, within bound.
func connectOnce(ctx context.Context, open func(context.Context) (Backend, error), probe func(context.Context, Backend) error, bound time.Duration) (Backend, error) {
	// At least a moment: one last look rather than none.
	ctx, cancel := context.WithTimeout(ctx, max(bound, time.Millisecond))
	defer cancel()
	b, err := open(ctx)
	if err != nil {
		return nil, deadlineUnavailable(ctx, err)
	}
	if probe == nil {
		return b, nil
	}
	if err := probe(ctx, b); err != nil {
		b.Close()
		return nil, deadlineUnavailable(ctx, err)
	}
	return b, nil
}

// deadlineUnavailable marks an attempt cut short by its own deadline as the
// store being unavailable: a store that did not answer in time is one.
func deadlineUnavailable(ctx context.Context, err error) error {
	if !errors.Is(err, ErrUnavailable) && errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

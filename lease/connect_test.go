package lease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"coord/lease"
)

// fakeClock advances by the wait asked for, at once.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// stubBackend is a Backend that only answers Get, with err.
type stubBackend struct {
	lease.Backend
	err    error
	closed *int
}

func (b stubBackend) Get(context.Context, string) (lease.Record, error) { return lease.Record{}, b.err }
func (b stubBackend) Close() error                                      { *b.closed++; return nil }

// An unavailable store is retried with a growing wait, each retry said,
// until it answers; a probe that fails closes the Backend it probed.
func TestConnectRetriesUntilTheStoreAnswers(t *testing.T) {
	clock := &fakeClock{now: time.Unix(0, 0)}
	opens, closed := 0, 0
	open := func(context.Context) (lease.Backend, error) {
		opens++
		switch {
		case opens <= 2:
			return nil, fmt.Errorf("dial: %w", lease.ErrUnavailable)
		case opens <= 4:
			return stubBackend{err: fmt.Errorf("get: %w", lease.ErrUnavailable), closed: &closed}, nil
		}
		return stubBackend{closed: &closed}, nil
	}
	probe := func(ctx context.Context, b lease.Backend) error { _, err := b.Get(ctx, "x"); return err }
	var waits []time.Duration
	b, err := lease.Connect(context.Background(), open, probe, lease.ConnectConfig{
		RetryPeriod: 100 * time.Millisecond, RetryPeriodMax: 300 * time.Millisecond, Clock: clock,
		OnRetry: func(_ int, _ error, wait time.Duration) { waits = append(waits, wait) }})
	if err != nil || b == nil {
		t.Fatalf("Connect = %v, %v; want the Backend of the fifth attempt", b, err)
	}
	if want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}; !slices.Equal(waits, want) {
		t.Errorf("waits %v, want %v", waits, want)
	}
	if closed != 2 {
		t.Errorf("%d Backends closed, want the 2 whose probe failed", closed)
	}
}

// A store that never answers ends in an UnreachableError after the
// timeout, wrapping the last error; the last wait is cut to the time left.
func TestConnectGivesUpAfterTimeout(t *testing.T) {
	clock := &fakeClock{now: time.Unix(0, 0)}
	attempts := 0
	open := func(context.Context) (lease.Backend, error) {
		attempts++
		return nil, fmt.Errorf("dial %d: %w", attempts, lease.ErrUnavailable)
	}
	var waits []time.Duration
	_, err := lease.Connect(context.Background(), open, nil, lease.ConnectConfig{
		Timeout: time.Second, RetryPeriod: 300 * time.Millisecond, Clock: clock,
		OnRetry: func(_ int, _ error, wait time.Duration) { waits = append(waits, wait) }})
	var u *lease.UnreachableError
	if !errors.As(err, &u) || !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Connect error %v; want an UnreachableError wrapping ErrUnavailable", err)
	}
	// Attempts at 0, 300 ms, 900 ms and a last one at 1 s.
	if u.Attempts != 4 || u.Waited != time.Second || u.AttemptsString() != "4 attempts" {
		t.Errorf("gave up after %s in %v; want 4 attempts in 1s", u.AttemptsString(), u.Waited)
	}
	if want := []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 100 * time.Millisecond}; !slices.Equal(waits, want) {
		t.Errorf("waits %v, want %v (the last cut to what is left)", waits, want)
	}
}

// Errors that waiting will not mend are returned at once.
func TestConnectReturnsOtherErrorsAtOnce(t *testing.T) {
	attempts := 0
	open := func(context.Context) (lease.Backend, error) {
		attempts++
		return nil, fmt.Errorf("bad URL: %w", lease.ErrInvalid)
	}
	_, err := lease.Connect(context.Background(), open, nil, lease.ConnectConfig{Clock: &fakeClock{}})
	if !errors.Is(err, lease.ErrInvalid) || attempts != 1 {
		t.Errorf("Connect = %v after %d attempts; want ErrInvalid after 1", err, attempts)
	}
}

package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"
)

// Config configures an Elector. Start from DefaultConfig and set Name and
// Holder; Validate reports every field that is wrong.
//
// The timing fields obey TTL > RenewDeadline > RenewInterval > 0, as in
// client-go's leader election:
//
//	|<-------------------------------- TTL ---------------------------------->|
//	|<------------- RenewDeadline ------------->|                             |
//	|<- RenewInterval ->|                       |                             |
//	renew sent          next renew              leader steps down             others may acquire
//
// A leader renews every RenewInterval. If it has not renewed successfully
// within RenewDeadline of the start of its last successful renewal, it steps
// down (cancels its elected context) while TTL - RenewDeadline is still left
// before the store lets anyone else acquire the lease. That margin is what a
// leader has to stop its work; `coord run` spends it on the grace period.
type Config struct {
	// Name is the lease's name in the store.
	Name string

	// Holder is this participant's identity, unique among contenders (a
	// host name and process id, say). It is recorded in the store.
	Holder string

	// TTL is how long the store keeps the lease after an acquire or renew
	// without hearing from the holder.
	TTL time.Duration

	// RenewDeadline is how long, from the start of the last successful
	// renew (or acquire) request, the leader keeps acting as leader without
	// another success. It must be less than TTL.
	RenewDeadline time.Duration

	// RenewInterval is the time between the starts of two renew requests.
	// It must be less than RenewDeadline, so that a failed renew is retried
	// before the deadline.
	RenewInterval time.Duration

	// RetryPeriod is how long a failed request waits before it is retried,
	// and how often a candidate tries to acquire when it has no open watch
	// (with one, watch events make it try at once, and it retries on its
	// own only once a TTL, in case an event was missed).
	RetryPeriod time.Duration

	// Clock is the source of time. Nil means the system's monotonic clock;
	// tests inject their own (or run under testing/synctest).
	Clock Clock

	// Rand is the source of the jitter stretching retries by 0-20 %, so
	// that contenders that failed together do not retry together. Nil
	// means one seeded from the clock; tests inject a seeded one to replay
	// a run. Only the Run goroutine uses it.
	Rand *rand.Rand

	// Logger receives the Elector's diagnostics. Nil means slog.Default().
	Logger *slog.Logger

	// Callbacks are called on changes of leadership. All are optional.
	Callbacks Callbacks
}

// Callbacks are the Elector's notifications.
//
// Goroutines and order: OnLeaderChanged, OnRenewed and OnLost run on the goroutine that
// called Elector.Run, one at a time, in the order of the events. OnElected
// runs on a goroutine of its own, started once per tenure. For one tenure the
// order is always:
//
//	OnLeaderChanged(our record) -> go OnElected(ctx, token) ... ctx cancelled -> OnLost(token, err)
//
// and the Elector does not campaign again, nor does Run return, until that
// tenure's OnElected has returned. OnElected must therefore return soon after
// its ctx is done.
type Callbacks struct {
	// OnElected starts the leader's work. ctx is cancelled as soon as this
	// participant can no longer be sure it holds the lease: its renew
	// deadline passed, the store said the lease is lost, or it resigned.
	// context.Cause(ctx) says why: ErrResigned (the lease is still held,
	// and renewed, until OnElected returns; then it is released), or the
	// error OnLost receives (wrapping ErrDeadline: the store may still hold
	// the lease for TTL - RenewDeadline; or ErrLost: it is gone already).
	// token is the tenure's fencing token: pass it to every resource the
	// leader writes to, so that a stale leader's writes can be rejected.
	OnElected func(ctx context.Context, token uint64)

	// OnLost is called after the tenure with token has ended and its ctx has
	// been cancelled, and before the lease is handed back. Unless err wraps
	// ErrLost, no other participant can have been elected before OnLost
	// was called, so a report it makes precedes theirs. err is nil when
	// this participant resigned (Resign, or Run's ctx ended): the lease is
	// released as soon as OnLost returns (if the release fails, it is
	// logged and the lease expires at its TTL). Otherwise err says why the
	// tenure was lost, and wraps ErrLost (the store gave the lease to
	// another) or ErrDeadline (no successful renew within the renew
	// deadline).
	OnLost func(token uint64, err error)

	// OnRenewed is called after each successful renewal, with the renewed
	// record (its Expiry on this process's clock).
	OnRenewed func(r Record)

	// OnLeaderChanged is called when the observed holder or token of the
	// lease changes: to another holder, to this participant (before
	// OnElected), or to free (Holder == "").
	OnLeaderChanged func(r Record)
}

// ErrResigned is the cause of an elected context cancelled because the
// participant resigned (Resign, or the end of Run's context).
var ErrResigned = errors.New("lease: resigned")

// ErrDeadline means a leader stepped down because it could not renew its
// lease within its renew deadline.
var ErrDeadline = errors.New("lease: renew deadline passed")

// DefaultConfig returns a Config with the default timings: a 9 s TTL (the
// articles' LEASE_DURATION), a 6 s renew deadline, a renew every 2 s and
// retries every 1 s. Name and Holder are left empty.
func DefaultConfig() Config {
	return ScaledConfig(9 * time.Second)
}

// ScaledConfig returns a Config whose timings keep the default proportions
// for the given TTL: RenewDeadline = 2/3 TTL, RenewInterval = 2/9 TTL,
// RetryPeriod = 1/9 TTL. The commands use it when only --ttl is given.
func ScaledConfig(ttl time.Duration) Config {
	// Whole milliseconds read better in flags and logs, where they are
	// long enough for the rounding not to matter.
	round := func(d time.Duration) time.Duration {
		if d >= 10*time.Millisecond {
			return d.Truncate(time.Millisecond)
		}
		return d
	}
	return Config{
		TTL:           ttl,
		RenewDeadline: round(ttl * 2 / 3),
		RenewInterval: round(ttl * 2 / 9),
		RetryPeriod:   round(ttl / 9),
	}
}

// Validate checks the configuration and returns an error wrapping
// ErrInvalid that names every field in error.
func (c Config) Validate() error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if c.Name == "" {
		add("Name is empty")
	}
	if c.Holder == "" {
		add("Holder is empty")
	}
	if c.RenewInterval <= 0 {
		add("RenewInterval %v is not positive", c.RenewInterval)
	}
	if c.RetryPeriod <= 0 {
		add("RetryPeriod %v is not positive", c.RetryPeriod)
	}
	if c.RenewDeadline <= c.RenewInterval {
		add("RenewDeadline %v is not greater than RenewInterval %v", c.RenewDeadline, c.RenewInterval)
	}
	if c.TTL <= c.RenewDeadline {
		add("TTL %v is not greater than RenewDeadline %v", c.TTL, c.RenewDeadline)
	}
	if len(problems) == 0 {
		return nil
	}
	// One line, so that a command can print it as its one-line error.
	return fmt.Errorf("%w: config: %s", ErrInvalid, strings.Join(problems, "; "))
}

// Clock is a source of time, injectable for tests. Durations are measured
// with Now's monotonic reading, so a wall-clock step (NTP, an operator)
// changes no deadline.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has elapsed.
	After(d time.Duration) <-chan time.Time
}

// systemClock is the real clock.
type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Elector campaigns for a lease and keeps it while it can: acquire, renew,
// watch, step down, release. It works over any Backend.
//
// An Elector is safe for concurrent use: Run owns its state on one goroutine;
// Resign, IsLeader and Token may be called from any goroutine.
type Elector struct {
	backend Backend
	cfg     Config
	clock   Clock
	log     *slog.Logger
	rand    *rand.Rand // jitter of retries; owned by the Run goroutine

	resignOnce sync.Once
	resign     chan struct{}
	running    atomic.Bool
	token      atomic.Uint64 // token of the current tenure, 0 when not leading

	// Owned by the Run goroutine.
	watch    <-chan Record
	observed Record // last record reported through OnLeaderChanged
}

// NewElector returns an Elector for cfg over b, or an error wrapping
// ErrInvalid if cfg does not validate. The Elector does nothing until Run.
func NewElector(b Backend, cfg Config) (*Elector, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil Backend", ErrInvalid)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Elector{backend: b, cfg: cfg, clock: cfg.Clock, log: cfg.Logger, resign: make(chan struct{})}
	if e.clock == nil {
		e.clock = systemClock{}
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	e.log = e.log.With("lease", cfg.Name, "holder", cfg.Holder)
	e.rand = cfg.Rand
	if e.rand == nil {
		seed := uint64(time.Now().UnixNano())
		e.rand = rand.New(rand.NewPCG(seed, seed>>17^0x9e3779b97f4a7c15))
	}
	return e, nil
}

// IsLeader reports whether the Elector currently holds the lease, as far as
// it knows: true from just before OnElected starts until its ctx is
// cancelled.
func (e *Elector) IsLeader() bool { return e.token.Load() != 0 }

// Token returns the fencing token of the current tenure, or 0 when not
// leading.
func (e *Elector) Token() uint64 { return e.token.Load() }

// Resign hands the lease back: the elected ctx is cancelled at once, the
// lease is released as soon as OnElected has returned, and Run returns. A
// participant that does not hold the lease just stops campaigning. Resign
// may be called more than once, and before Run.
func (e *Elector) Resign() { e.resignOnce.Do(func() { close(e.resign) }) }

// Run campaigns until ctx is done or Resign is called, then releases the
// lease if it holds it and returns nil. Backend errors are logged and
// retried: a store that is down is a store to wait for. Run returns an
// error only if it was already running, or when the store answered
// maxUnrepairable acquisitions in a row with an error wrapping
// ErrUnrepairable (a lock file it may not replace, say): waiting would not
// help, and an operator should hear of it.
func (e *Elector) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: Elector.Run called twice", ErrInvalid)
	}
	defer e.running.Store(false)
	// The watch opened below lives until Run returns.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer func() { e.watch = nil }()
	unrepairable := 0 // consecutive acquisitions that failed with ErrUnrepairable
	for !e.stopping(ctx) {
		start := e.clock.Now()
		rec, err := e.request(ctx, e.cfg.RenewDeadline, func(rctx context.Context) (Record, error) {
			return e.backend.Acquire(rctx, e.cfg.Name, e.cfg.Holder, e.cfg.TTL)
		})
		if errors.Is(err, ErrUnrepairable) {
			unrepairable++
		} else {
			unrepairable = 0
		}
		switch {
		case err == nil && e.late(start):
			// The answer came after the deadline measured from the
			// request's start (this process was paused, say): by now the
			// lease may have passed to another. Hand it back, do not lead.
			e.log.Warn("lease: acquisition answered after its deadline; handing it back", "token", rec.Token,
				"late_by", e.clock.Now().Sub(start.Add(e.cfg.RenewDeadline)))
			e.releaseBestEffort(ctx, rec.Token)
		case err == nil:
			e.lead(ctx, rec, start)
		case errors.Is(err, ErrHeld):
			e.observe(rec)
			e.waitForChance(ctx, rec)
		case unrepairable >= maxUnrepairable:
			e.log.Error("lease: giving up: the store needs an operator", "attempts", unrepairable, "err", err)
			return err
		default:
			if !errors.Is(err, context.Canceled) {
				e.log.Warn("lease: acquire failed", "err", err)
			}
			e.sleep(ctx, e.jitter(e.cfg.RetryPeriod))
		}
	}
	return nil
}

// maxUnrepairable is how many acquisitions in a row may fail with
// ErrUnrepairable before Run gives up and returns the error.
const maxUnrepairable = 3

// late reports whether an answer to a request started at start arrived
// after the request's deadline, start + RenewDeadline, on the monotonic
// clock.
func (e *Elector) late(start time.Time) bool {
	return !e.clock.Now().Before(start.Add(e.cfg.RenewDeadline))
}

// releaseBestEffort hands token back, bounded by the retry period; its
// result is only logged: a lease that is not released expires.
func (e *Elector) releaseBestEffort(ctx context.Context, token uint64) {
	_, err := e.request(ctx, e.cfg.RetryPeriod, func(rctx context.Context) (Record, error) {
		return Record{}, e.backend.Release(rctx, e.cfg.Name, e.cfg.Holder, token)
	})
	if err != nil && !errors.Is(err, ErrLost) {
		e.log.Debug("lease: best-effort release failed", "token", token, "err", err)
	}
}

// stopping reports whether Run should stop: ctx done or Resign called.
func (e *Elector) stopping(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	case <-e.resign:
		return true
	default:
		return false
	}
}

// request runs one backend call with a timeout, so that a hung store cannot
// hold the Run goroutine past a deadline.
func (e *Elector) request(ctx context.Context, timeout time.Duration, call func(context.Context) (Record, error)) (Record, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	return call(rctx)
}

// waitForChance waits, as a candidate, until the lease may be free: a watch
// event saying it changed, its expiry, the retry period (a fallback in case
// a watch event was missed), Resign or ctx.
func (e *Elector) waitForChance(ctx context.Context, held Record) {
	var expiry <-chan time.Time
	if !held.Expiry.IsZero() {
		// Expiry is measured from before the store acted, so the store
		// may still hold the lease at that instant; the acquire then just
		// fails and the retry timer tries again.
		// A store whose clock disagrees may report an expiry already past
		// while it still holds the lease; waiting a little keeps the
		// candidate from hammering it.
		expiry = e.clock.After(max(held.Expiry.Sub(e.clock.Now()), e.cfg.RetryPeriod/16))
	}
	// With a watch open, the store pushes every change and the expiry timer
	// covers a holder that stops renewing: the retry is then only a safety
	// net against a missed event, once a TTL rather than once a retry
	// period, so that waiting candidates do not poll the store.
	retryAfter := e.cfg.RetryPeriod
	if e.ensureWatch(ctx) != nil && expiry != nil {
		retryAfter = e.cfg.TTL
	}
	retry := e.clock.After(e.jitter(retryAfter))
	for {
		watch := e.ensureWatch(ctx)
		select {
		case <-ctx.Done():
			return
		case <-e.resign:
			return
		case <-expiry:
			e.log.Debug("lease: candidate woke at the holder's expiry")
			return
		case <-retry:
			e.log.Debug("lease: candidate retries after the retry period")
			return
		case rec, ok := <-watch:
			if !ok {
				// The watch failed: events may have been missed until it
				// is reopened, so fall back to the retry period.
				e.watch = nil
				retry = e.clock.After(e.jitter(e.cfg.RetryPeriod))
				continue
			}
			e.observe(rec)
			if rec.Free() || rec.Token != held.Token {
				return
			}
		}
	}
}

// ensureWatch returns the watch channel, opening it if needed. A nil channel
// (watch failed) blocks forever in a select, leaving the retry timer to
// wake the candidate.
func (e *Elector) ensureWatch(ctx context.Context) <-chan Record {
	if e.watch != nil {
		return e.watch
	}
	ch, err := e.backend.Watch(ctx, e.cfg.Name)
	if err != nil {
		e.log.Debug("lease: watch failed; relying on retries", "err", err)
		return nil
	}
	e.watch = ch
	return ch
}

// observe reports a change of the observed holder or token.
func (e *Elector) observe(r Record) {
	if r.Holder == e.observed.Holder && r.Token == e.observed.Token {
		return
	}
	e.observed = r
	if cb := e.cfg.Callbacks.OnLeaderChanged; cb != nil {
		cb(r)
	}
}

// tenure is the state of one term of leadership.
type tenure struct {
	token     uint64
	deadline  time.Time // step down at this instant unless renewed
	nextRenew time.Time
	resigning bool // ctx cancelled on request; release once work returns
}

// renewal is the answer to one renew request, started at start.
type renewal struct {
	start time.Time
	rec   Record
	err   error
}

// lead holds the lease acquired at start until it is lost or handed back. It
// returns only after the tenure's OnElected has returned.
//
// Renew requests run on a goroutine of their own, one at a time, so that
// the deadline is kept even by a store call that ignores its context: at
// the deadline the leader steps down whether or not the call has returned.
// An answer that arrives at or after the deadline is not a renewal (the
// lease may have passed to another by then) and steps the leader down.
func (e *Elector) lead(ctx context.Context, rec Record, start time.Time) {
	t := &tenure{
		token:     rec.Token,
		deadline:  start.Add(e.cfg.RenewDeadline),
		nextRenew: start.Add(e.cfg.RenewInterval),
	}
	e.observe(rec)
	e.token.Store(t.token)
	workCtx, cancelWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelWork(ErrResigned)
	workDone := make(chan struct{})
	go func() {
		defer close(workDone)
		if cb := e.cfg.Callbacks.OnElected; cb != nil {
			cb(workCtx, t.token)
		}
	}()
	e.log.Debug("lease: elected", "token", t.token)
	// The tenure watch outlives Run's ctx: it ends only when lead returns,
	// after the work has. A Backend may tie the tenure to the watch (a
	// raft:// session: the cluster frees the lease soon after it ends), and
	// a holder must not give its lease up while its work still runs.
	tenureCtx, endTenureWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer endTenureWatch()
	revoked := e.watchTenure(tenureCtx, t.token)

	// stepDown ends the tenure for err, then hands the lease back, best
	// effort: the store may still hold it (the deadline passed), or may
	// still show the tenure alive to others (the file store's tenure
	// socket, when its records were removed); a release of a tenure the
	// store has given away already changes nothing.
	stepDown := func(err error) {
		e.token.Store(0)
		cancelWork(err)
		e.log.Info("lease: stepping down", "token", t.token, "err", err)
		if cb := e.cfg.Callbacks.OnLost; cb != nil {
			cb(t.token, err)
		}
		<-workDone
		e.releaseBestEffort(ctx, t.token)
	}

	resign, ctxDone := e.resign, ctx.Done()
	workReturned := false
	renewDone := make(chan renewal, 1) // buffered: an abandoned request never blocks
	renewing := false
	for {
		if t.resigning && workReturned && !renewing {
			e.release(ctx, t)
			return
		}
		now := e.clock.Now()
		if !now.Before(t.deadline) {
			stepDown(fmt.Errorf("%w: no successful renew within %v", ErrDeadline, e.cfg.RenewDeadline))
			return
		}
		var work <-chan struct{}
		if !workReturned {
			work = workDone
		}
		var renewTimer <-chan time.Time
		if !renewing {
			renewTimer = e.clock.After(max(t.nextRenew.Sub(now), 0))
		}
		select {
		case <-ctxDone:
			resign, ctxDone = nil, nil
			e.beginResign(t, cancelWork)
		case <-resign:
			resign, ctxDone = nil, nil
			e.beginResign(t, cancelWork)
		case <-work:
			// Work that returns on its own leaves the lease held (a leader
			// with nothing to do is still the leader) until resigned or lost.
			workReturned = true
		case err, ok := <-revoked:
			if !ok {
				revoked = nil
				continue
			}
			stepDown(err)
			return
		case <-e.clock.After(t.deadline.Sub(now)):
			// The check at the top of the loop steps down.
		case <-renewTimer:
			renewing = true
			e.startRenew(ctx, t, renewDone)
		case r := <-renewDone:
			renewing = false
			if err := e.renewed(t, r); err != nil {
				stepDown(err)
				return
			}
		}
	}
}

// watchTenure returns the channel on which the Backend revokes the tenure
// of token, if it can (TenureWatcher), or nil.
func (e *Elector) watchTenure(ctx context.Context, token uint64) <-chan error {
	tw, ok := e.backend.(TenureWatcher)
	if !ok {
		return nil
	}
	ch, err := tw.WatchTenure(ctx, e.cfg.Name, token)
	if err != nil {
		e.log.Debug("lease: tenure watch failed; relying on renewals", "err", err)
		return nil
	}
	return ch
}

// beginResign cancels the tenure's work; the lease is released when the work
// has returned.
func (e *Elector) beginResign(t *tenure, cancelWork context.CancelCauseFunc) {
	t.resigning = true
	e.token.Store(0)
	cancelWork(ErrResigned)
}

// startRenew sends one renew request on a goroutine of its own; its answer
// arrives on done. The request's context ends at the tenure's deadline.
func (e *Elector) startRenew(ctx context.Context, t *tenure, done chan<- renewal) {
	start := e.clock.Now()
	timeout, token := t.deadline.Sub(start), t.token
	go func() {
		rec, err := e.request(ctx, timeout, func(rctx context.Context) (Record, error) {
			return e.backend.Renew(rctx, e.cfg.Name, e.cfg.Holder, token, e.cfg.TTL)
		})
		done <- renewal{start: start, rec: rec, err: err}
	}()
}

// renewed handles the answer to one renew request. It returns nil on
// success or on a failure worth retrying before the deadline, an error
// wrapping ErrLost when the lease is gone, ErrUnrepairable as the store
// said it, and ErrDeadline when the answer came too late to count.
func (e *Elector) renewed(t *tenure, r renewal) error {
	now := e.clock.Now()
	switch {
	case !now.Before(t.deadline):
		// Checked against the deadline in force when the request was sent
		// (at most RenewDeadline after its start), on the monotonic clock:
		// an answer that arrives later, however good, may describe a lease
		// that has since expired and passed to another (a process paused
		// while the answer was in flight).
		if r.err == nil {
			e.log.Warn("lease: renewal answered after the renew deadline; stepping down", "token", t.token, "late_by", now.Sub(t.deadline))
		}
		return fmt.Errorf("%w: renewal answered %v after the renew deadline", ErrDeadline, now.Sub(t.deadline))
	case r.err == nil:
		// Measured from the start of the request: the store's expiry is
		// at least start + TTL, so stepping down at start + RenewDeadline
		// leaves TTL - RenewDeadline before anyone else can acquire.
		t.deadline = r.start.Add(e.cfg.RenewDeadline)
		t.nextRenew = r.start.Add(e.cfg.RenewInterval)
		if cb := e.cfg.Callbacks.OnRenewed; cb != nil {
			cb(r.rec)
		}
		return nil
	case errors.Is(r.err, ErrLost):
		e.observe(r.rec)
		return r.err
	case errors.Is(r.err, ErrUnrepairable):
		// Waiting for the deadline would not help: say why now.
		return r.err
	default:
		e.log.Warn("lease: renew failed; retrying", "token", t.token, "err", r.err)
		t.nextRenew = now.Add(e.jitter(e.cfg.RetryPeriod))
		return nil
	}
}

// release reports the end of a resigned tenure, then hands the lease back.
// The report comes first, so that it precedes any other participant's
// election in a timeline merged from several participants' reports.
func (e *Elector) release(ctx context.Context, t *tenure) {
	if cb := e.cfg.Callbacks.OnLost; cb != nil {
		cb(t.token, nil)
	}
	_, err := e.request(ctx, e.cfg.RenewDeadline, func(rctx context.Context) (Record, error) {
		return Record{}, e.backend.Release(rctx, e.cfg.Name, e.cfg.Holder, t.token)
	})
	switch {
	case errors.Is(err, ErrLost):
		// The tenure ended before its renew deadline, so the store gave
		// the lease away early: its clock runs fast, it lost state, or
		// the lease was bound to a session that ended (PostgreSQL's
		// advisory=true).
		e.log.Error("lease: the store had given the lease away before it was released", "token", t.token, "err", err)
	case err != nil:
		e.log.Warn("lease: release failed; the lease will expire", "token", t.token, "err", err)
	}
}

// jitter returns d stretched by a random 0-20 %, so that contenders that
// failed together do not retry together.
func (e *Elector) jitter(d time.Duration) time.Duration {
	return d + time.Duration(e.rand.Int64N(int64(d)/5+1))
}

// sleep waits for d, Resign or ctx.
func (e *Elector) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-e.resign:
	case <-e.clock.After(d):
	}
}

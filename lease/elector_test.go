//go:build linux

package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"coord/lease"
	"coord/lease/file"
	"coord/lease/leasetest"
)

func openFile(t *testing.T, dir string) lease.Backend {
	t.Helper()
	b, err := file.Open(filepath.Join(dir, "leader.lock"), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func testConfig(holder string) lease.Config {
	return lease.Config{
		Name: "leader.lock", Holder: holder,
		TTL: 900 * time.Millisecond, RenewDeadline: 600 * time.Millisecond,
		RenewInterval: 150 * time.Millisecond, RetryPeriod: 50 * time.Millisecond,
	}
}

// wait receives from ch or fails the test after a generous timeout.
func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// A leader whose store stops answering cancels its elected context at its
// renew deadline, before the lease can pass to anyone else.
func TestElectorStepsDownBeforeOthersCanAcquire(t *testing.T) {
	dir := t.TempDir()
	faulty := leasetest.NewFaulty(openFile(t, dir))
	other := openFile(t, dir)

	elected := make(chan context.Context, 1)
	lost := make(chan error, 1)
	cfg := testConfig("alice")
	// A second of margin between stepping down and expiry, so that a
	// loaded machine delaying the leader's timer does not fail the test.
	cfg.TTL = 1500 * time.Millisecond
	cfg.RenewDeadline = 500 * time.Millisecond
	// One tenure: after it, alice stops campaigning, so that bob's
	// acquisition does not race her next one.
	var e *lease.Elector
	cfg.Callbacks = lease.Callbacks{
		OnElected: func(ctx context.Context, token uint64) { elected <- ctx; <-ctx.Done() },
		OnLost: func(token uint64, err error) {
			lost <- err
			e.Resign()
		},
	}
	e, err := lease.NewElector(faulty, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	// Run campaigns again after stepping down, creating files in dir:
	// stop it before the backends close and dir is removed.
	t.Cleanup(func() { cancel(); <-done })
	workCtx := wait(t, elected, "alice's election")

	faulty.HangRenewals(true)
	acquired := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if _, err := other.Acquire(ctx, cfg.Name, "bob", time.Second); err == nil {
				// Alice must have stepped down already.
				acquired <- workCtx.Err()
				return
			}
			time.Sleep(10 * time.Millisecond) // workload pacing
		}
	}()
	<-workCtx.Done()
	if cause := context.Cause(workCtx); !errors.Is(cause, lease.ErrDeadline) {
		t.Errorf("elected context cause = %v, want ErrDeadline", cause)
	}
	if err := wait(t, lost, "OnLost"); !errors.Is(err, lease.ErrDeadline) {
		t.Errorf("OnLost err = %v, want ErrDeadline", err)
	}
	if aliceCtxErr := wait(t, acquired, "bob's acquisition"); aliceCtxErr == nil {
		t.Error("bob acquired the lease while alice's elected context was still live")
	}
	if e.IsLeader() {
		t.Error("IsLeader after stepping down")
	}
}

// Renewals that fail for less than the renew deadline cost nothing.
func TestElectorRidesOutBriefFailures(t *testing.T) {
	faulty := leasetest.NewFaulty(openFile(t, t.TempDir()))
	elected := make(chan context.Context, 1)
	renewed := make(chan struct{}, 1)
	cfg := testConfig("alice")
	cfg.Callbacks = lease.Callbacks{
		OnElected: func(ctx context.Context, token uint64) { elected <- ctx; <-ctx.Done() },
		OnRenewed: func(lease.Record) {
			select {
			case renewed <- struct{}{}:
			default:
			}
		},
	}
	e, err := lease.NewElector(faulty, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	workCtx := wait(t, elected, "election")
	faulty.FailRenewals(true)
	wait(t, faulty.FaultyRenewals(), "a failed renewal")
	faulty.FailRenewals(false)
	select {
	case <-renewed: // drain one that may predate the failure
	default:
	}
	wait(t, renewed, "a renewal after the failures")
	if workCtx.Err() != nil && !errors.Is(context.Cause(workCtx), lease.ErrDeadline) {
		t.Errorf("elected context ended: %v", context.Cause(workCtx))
	}
	cancel()
	wait(t, done, "Run to return")
}

// The callbacks of one tenure come in the documented order, and Resign
// releases the lease.
func TestElectorCallbackOrderAndResign(t *testing.T) {
	dir := t.TempDir()
	b := openFile(t, dir)
	var (
		mu    sync.Mutex
		trace []string
	)
	record := func(s string) {
		mu.Lock()
		trace = append(trace, s)
		mu.Unlock()
	}
	elected := make(chan struct{})
	cfg := lease.DefaultConfig() // long deadlines: a slow machine must not step down here
	cfg.Name, cfg.Holder = "leader.lock", "alice"
	cfg.Callbacks = lease.Callbacks{
		OnLeaderChanged: func(r lease.Record) { record("leader " + r.Holder) },
		OnElected: func(ctx context.Context, token uint64) {
			record("elected")
			close(elected)
			<-ctx.Done()
			record("cancelled: " + context.Cause(ctx).Error())
		},
		OnLost: func(token uint64, err error) { record(fmt.Sprintf("lost %v", err)) },
	}
	e, err := lease.NewElector(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { e.Run(context.Background()); close(done) }()
	wait(t, elected, "election")
	if !e.IsLeader() || e.Token() == 0 {
		t.Errorf("IsLeader %v, Token %d after election", e.IsLeader(), e.Token())
	}
	e.Resign()
	wait(t, done, "Run to return after Resign")
	want := []string{"leader alice", "elected", "cancelled: lease: resigned", "lost <nil>"}
	mu.Lock()
	got := fmt.Sprint(trace)
	mu.Unlock()
	if got != fmt.Sprint(want) {
		t.Errorf("callbacks: %s, want %s", got, fmt.Sprint(want))
	}
	if rec, err := b.Get(context.Background(), cfg.Name); err != nil || !rec.Free() {
		t.Errorf("after Resign the lease is %+v, %v; want free", rec, err)
	}
	if err := e.Run(context.Background()); err != nil {
		t.Errorf("Run after Resign = %v, want nil at once", err)
	}
}

func TestNewElectorRejectsBadConfig(t *testing.T) {
	b := openFile(t, t.TempDir())
	cfg := testConfig("alice")
	cfg.TTL = cfg.RenewDeadline
	if _, err := lease.NewElector(b, cfg); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("NewElector with TTL == RenewDeadline: %v, want ErrInvalid", err)
	}
	if _, err := lease.NewElector(nil, testConfig("alice")); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("NewElector(nil backend): %v, want ErrInvalid", err)
	}
}

func ExampleElector() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	b, err := file.Open(filepath.Join(dir, "leader.lock"), file.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	cfg := lease.DefaultConfig()
	cfg.Name, cfg.Holder = "leader.lock", "alice"
	var e *lease.Elector
	cfg.Callbacks = lease.Callbacks{
		OnElected: func(ctx context.Context, token uint64) {
			// The file store's tokens start from the wall clock in
			// microseconds, so that they keep growing even if its
			// directory is wiped.
			fmt.Println("elected with a fencing token:", token > 0)
			e.Resign() // the work is done: hand the lease back
		},
		OnLost: func(token uint64, err error) {
			fmt.Println("released, error:", err)
		},
	}
	e, err = lease.NewElector(b, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	e.Run(context.Background())
	// Output:
	// elected with a fencing token: true
	// released, error: <nil>
}

// countingBackend counts a candidate's Acquire calls; with noWatch set it
// has no watch, like a store that cannot push.
type countingBackend struct {
	lease.Backend
	mu       sync.Mutex
	acquires int
	noWatch  bool
}

func (c *countingBackend) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (lease.Record, error) {
	c.mu.Lock()
	c.acquires++
	c.mu.Unlock()
	return c.Backend.Acquire(ctx, name, holder, ttl)
}

func (c *countingBackend) Watch(ctx context.Context, name string) (<-chan lease.Record, error) {
	if c.noWatch {
		return nil, errors.New("no watch here")
	}
	return c.Backend.Watch(ctx, name)
}

func (c *countingBackend) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acquires
}

// A candidate with an open watch waits for the store to push a change (or
// for the holder's expiry) instead of polling every retry period; without a
// watch it polls.
func TestCandidatePollsOnlyWithoutAWatch(t *testing.T) {
	for _, noWatch := range []bool{false, true} {
		t.Run(fmt.Sprintf("noWatch=%v", noWatch), func(t *testing.T) {
			dir := t.TempDir()
			holder := openFile(t, dir)
			ctx := context.Background()
			// A holder that renews (by hand, below) keeps the lease for
			// the whole test.
			rec, err := holder.Acquire(ctx, "leader.lock", "alice", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			counting := &countingBackend{Backend: openFile(t, dir), noWatch: noWatch}
			cfg := testConfig("bob")
			cfg.TTL, cfg.RenewDeadline, cfg.RenewInterval, cfg.RetryPeriod = time.Minute, 40*time.Second, 20*time.Second, 20*time.Millisecond
			e, err := lease.NewElector(counting, cfg)
			if err != nil {
				t.Fatal(err)
			}
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- e.Run(runCtx) }()
			// Twenty retry periods, with renewals pushed to the watch.
			for range 10 {
				time.Sleep(2 * cfg.RetryPeriod) // the span being measured, not a wait for a state
				if _, err := holder.Renew(ctx, "leader.lock", "alice", rec.Token, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			cancel()
			wait(t, done, "Run to return")
			n := counting.count()
			if noWatch && n < 3 {
				t.Errorf("without a watch the candidate tried %d times in 20 retry periods; want it to poll", n)
			}
			if !noWatch && n > 2 {
				t.Errorf("with a watch the candidate tried %d times in 20 retry periods; want it to wait for events", n)
			}
		})
	}
}

// downBackend is a store that is always down.
type downBackend struct{ lease.Backend }

func (downBackend) Acquire(context.Context, string, string, time.Duration) (lease.Record, error) {
	return lease.Record{}, lease.ErrUnavailable
}

// recordingClock fires every timer at once and records the durations asked
// for; after n of them it resigns e.
type recordingClock struct {
	mu     sync.Mutex
	asked  []time.Duration
	n      int
	resign func()
}

func (c *recordingClock) Now() time.Time { return time.Now() }

func (c *recordingClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.asked = append(c.asked, d)
	if len(c.asked) == c.n {
		c.resign()
	}
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- time.Now()
	return ch
}

// The retry jitter comes from Config.Rand: two Electors given equal seeds
// wait the same stretched retry periods against a store that is down.
func TestRetryJitterComesFromConfigRand(t *testing.T) {
	retries := func(seed uint64) []time.Duration {
		cfg := testConfig("alice")
		cfg.Rand = rand.New(rand.NewPCG(seed, 1))
		cfg.Logger = slog.New(slog.DiscardHandler)
		clock := &recordingClock{n: 20}
		cfg.Clock = clock
		e, err := lease.NewElector(downBackend{}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		clock.resign = e.Resign
		e.Run(context.Background())
		clock.mu.Lock()
		defer clock.mu.Unlock()
		for _, d := range clock.asked {
			if d < cfg.RetryPeriod || d > cfg.RetryPeriod+cfg.RetryPeriod/5 {
				t.Errorf("waited %v, want the retry period %v stretched by 0-20 %%", d, cfg.RetryPeriod)
			}
		}
		return clock.asked
	}
	a, b, other := retries(7), retries(7), retries(8)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("equal seeds, different waits:\n%v\n%v", a, b)
	}
	if fmt.Sprint(a) == fmt.Sprint(other) {
		t.Errorf("different seeds, equal waits: %v", a)
	}
}

// offsetClock is the system clock moved forward by a settable offset; its
// timers run in real time. Moving it forward is what a paused process sees
// on waking: the time has passed, but no timer has run.
type offsetClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *offsetClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *offsetClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func (c *offsetClock) jump(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// A renewal whose answer arrives after the renew deadline (measured from the
// start of the renewal, on the monotonic clock) is not reported as a
// renewal: the leader steps down with ErrDeadline. The store did renew
// here; only the answer was late, as for a process stopped while the answer
// was in flight, which wakes to find its time gone and its answer waiting.
func TestElectorIgnoresARenewalAnsweredAfterItsDeadline(t *testing.T) {
	faulty := leasetest.NewFaulty(openFile(t, t.TempDir()))
	clock := &offsetClock{}
	cfg := testConfig("alice")
	cfg.TTL, cfg.RenewDeadline, cfg.RenewInterval = 3*time.Second, 2*time.Second, 100*time.Millisecond
	cfg.Clock = clock
	var (
		mu      sync.Mutex
		renewed int
		e       *lease.Elector
	)
	elected := make(chan struct{}, 1)
	lost := make(chan error, 1)
	cfg.Callbacks = lease.Callbacks{
		OnElected: func(ctx context.Context, token uint64) { elected <- struct{}{}; <-ctx.Done() },
		OnRenewed: func(lease.Record) { mu.Lock(); renewed++; mu.Unlock() },
		OnLost:    func(_ uint64, err error) { lost <- err; e.Resign() },
	}
	e, err := lease.NewElector(faulty, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { e.Run(context.Background()); close(done) }()
	t.Cleanup(func() { e.Resign(); faulty.HoldRenewalAnswers(false); <-done })
	wait(t, elected, "election")

	faulty.HoldRenewalAnswers(true)
	wait(t, faulty.FaultyRenewals(), "a renewal whose answer is held")
	mu.Lock()
	before := renewed
	mu.Unlock()
	clock.jump(cfg.RenewDeadline + 500*time.Millisecond) // the pause
	faulty.HoldRenewalAnswers(false)                     // the answer, now late
	if err := wait(t, lost, "OnLost"); !errors.Is(err, lease.ErrDeadline) {
		t.Errorf("OnLost err = %v, want ErrDeadline", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if renewed != before {
		t.Errorf("the Elector reported the renewal answered %v after its deadline", 500*time.Millisecond)
	}
}

// A leader whose renewal never comes back (a store call that ignores its
// context) still steps down at its renew deadline, before anyone else can
// acquire: the deadline does not wait for the call.
func TestElectorStepsDownWhileARenewalIsOutstanding(t *testing.T) {
	dir := t.TempDir()
	faulty := leasetest.NewFaulty(openFile(t, dir))
	other := openFile(t, dir)
	cfg := testConfig("alice")
	cfg.TTL, cfg.RenewDeadline = 1500*time.Millisecond, 500*time.Millisecond
	var e *lease.Elector
	elected := make(chan context.Context, 1)
	renewedAfterHold := make(chan struct{}, 1)
	var holding sync.Mutex
	held := false
	cfg.Callbacks = lease.Callbacks{
		OnElected: func(ctx context.Context, token uint64) { elected <- ctx; <-ctx.Done() },
		OnRenewed: func(lease.Record) {
			holding.Lock()
			defer holding.Unlock()
			if held {
				select {
				case renewedAfterHold <- struct{}{}:
				default:
				}
			}
		},
		OnLost: func(uint64, error) { e.Resign() },
	}
	e, err := lease.NewElector(faulty, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); faulty.HoldRenewalAnswers(false); <-done })
	workCtx := wait(t, elected, "election")

	holding.Lock()
	held = true
	faulty.HoldRenewalAnswers(true)
	holding.Unlock()
	wait(t, faulty.FaultyRenewals(), "a renewal whose answer is held")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := other.Acquire(ctx, cfg.Name, "bob", time.Minute); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("bob never acquired the lease")
		}
		time.Sleep(10 * time.Millisecond) // workload pacing
	}
	if workCtx.Err() == nil {
		t.Error("bob acquired the lease while alice, her renewal outstanding, still led")
	}
	faulty.HoldRenewalAnswers(false)
	select {
	case <-renewedAfterHold:
		t.Error("alice reported a renewal after bob was elected")
	default:
	}
}

// tenureBackend records the contexts its tenure watches were given.
type tenureBackend struct {
	lease.Backend
	watched chan context.Context
}

func (b *tenureBackend) WatchTenure(ctx context.Context, name string, token uint64) (<-chan error, error) {
	b.watched <- ctx
	return make(chan error), nil
}

// A tenure watch ends only after the tenure's work has returned, even when
// Run's own ctx is cancelled first: a raft:// session, whose end frees the
// lease, must not end while the holder's work still runs.
func TestElectorEndsTenureWatchOnlyAfterWork(t *testing.T) {
	b := &tenureBackend{Backend: openFile(t, t.TempDir()), watched: make(chan context.Context, 1)}
	cfg := testConfig("alice")
	elected := make(chan struct{})
	finish := make(chan struct{})
	cfg.Callbacks.OnElected = func(ctx context.Context, _ uint64) {
		close(elected)
		<-ctx.Done()
		<-finish // work still running after its ctx ended
	}
	e, err := lease.NewElector(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- e.Run(ctx) }()
	wait(t, elected, "election")
	watchCtx := wait(t, b.watched, "the tenure watch")
	cancel()
	// Run's ctx is done and the work's ctx with it, but the work has not
	// returned: the tenure watch must still be open. Run's return, which
	// needs the work, is the event to wait on; until finish, it cannot.
	select {
	case <-watchCtx.Done():
		t.Fatal("the tenure watch ended while the work still ran")
	case err := <-ran:
		t.Fatalf("Run returned while the work still ran: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if watchCtx.Err() != nil {
		t.Fatal("the tenure watch ended while the work still ran")
	}
	close(finish)
	if err := wait(t, ran, "Run"); err != nil {
		t.Fatal(err)
	}
	wait(t, watchCtx.Done(), "the tenure watch's end")
}

package leasetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"coord/lease"
)

// Options tune the suite for a backend. The zero value uses the defaults.
type Options struct {
	// TTL is the lease TTL the tests use; it bounds how long a test waits
	// for an expiry. Default 250ms; a store whose operations take tens of
	// milliseconds wants more.
	TTL time.Duration
	// Contenders is the number of contenders of the exclusivity checker.
	// Default 6.
	Contenders int
	// Duration is how long the exclusivity checker runs. Default 3s.
	Duration time.Duration
	// Seed seeds the exclusivity checker's choices; 0 picks one (logged,
	// so that a failure can be replayed with it).
	Seed uint64
}

func (o Options) withDefaults() Options {
	if o.TTL <= 0 {
		o.TTL = 250 * time.Millisecond
	}
	if o.Contenders <= 0 {
		o.Contenders = 6
	}
	if o.Duration <= 0 {
		o.Duration = 3 * time.Second
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	return o
}

// Run runs the whole conformance suite against a Backend implementation,
// the exclusivity checker included, with default Options.
//
// newBackend is called many times (once per contender, again after each
// simulated crash); every Backend it returns must reach the same store. The
// suite uses a fresh lease name in each test, so the store need not be
// empty, and it closes every Backend it opened. newBackend may call
// t.Fatal, t.Skip and t.Cleanup on the t it is given.
func Run(t *testing.T, newBackend func(t *testing.T) lease.Backend) {
	RunWithOptions(t, newBackend, Options{})
}

// RunWithOptions is Run with Options.
func RunWithOptions(t *testing.T, newBackend func(t *testing.T) lease.Backend, opts Options) {
	opts = opts.withDefaults()
	open := func(t *testing.T) lease.Backend {
		t.Helper()
		b := newBackend(t)
		t.Cleanup(func() { b.Close() })
		return b
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, open func(*testing.T) lease.Backend, opts Options)
	}{
		{"AcquireFree", testAcquireFree},
		{"AcquireHeld", testAcquireHeld},
		{"Renew", testRenew},
		{"Release", testRelease},
		{"Expiry", testExpiry},
		{"CrashedHolder", testCrashedHolder},
		{"TokensGrow", testTokensGrow},
		{"Watch", testWatch},
		{"InvalidArguments", testInvalid},
		{"Closed", testClosed},
		{"Elector", testElector},
		{"Exclusivity", func(t *testing.T, open func(*testing.T) lease.Backend, opts Options) {
			CheckExclusivity(t, open, opts)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open, opts) })
	}
}

var nameSeq atomic.Uint64

// NewName returns a lease name not used before by this process: short, and
// valid in every backend (a file name, a key, a row id).
func NewName() string {
	return fmt.Sprintf("lt-%d-%d", os.Getpid(), nameSeq.Add(1))
}

// testCtx returns a context that ends with the test or after a minute.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, b lease.Backend, name, holder string, ttl time.Duration) lease.Record {
	t.Helper()
	rec, err := b.Acquire(testCtx(t), name, holder, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q, %q): %v", name, holder, err)
	}
	if rec.Holder != holder || rec.Token == 0 || rec.Name != name {
		t.Fatalf("Acquire(%q, %q) = %+v, want holder %q, a token, name %q", name, holder, rec, holder, name)
	}
	return rec
}

// WaitFor waits, through Watch (re-opened if it closes), until cond holds
// for the record of name, and returns that record. It fails the test after
// timeout.
func WaitFor(t *testing.T, b lease.Backend, name string, timeout time.Duration, what string, cond func(lease.Record) bool) lease.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(testCtx(t), timeout)
	defer cancel()
	var last lease.Record
	for ctx.Err() == nil {
		ch, err := b.Watch(ctx, name)
		if err != nil {
			t.Fatalf("Watch(%q): %v", name, err)
		}
		for rec := range ch {
			last = rec
			if cond(rec) {
				return rec
			}
		}
	}
	t.Fatalf("waiting %v for %s of lease %q: last record %+v", timeout, what, name, last)
	return last
}

func testAcquireFree(t *testing.T, open func(*testing.T) lease.Backend, o Options) {
	b := open(t)
	name := NewName()
	if rec, err := b.Get(testCtx(t), name); err != nil || !rec.Free() {
		t.Fatalf("Get of a new name = %+v, %v; want free, nil", rec, err)
	}
	before := time.Now()
	rec := mustAcquire(t, b, name, "alice", o.TTL)
	if rec.Expiry.Before(before.Add(o.TTL)) || rec.Expiry.After(time.Now().Add(o.TTL)) {
		t.Errorf("Expiry %v not within [send+TTL, return+TTL]", rec.Expiry)
	}
	got, err := b.Get(testCtx(t), name)
	if err != nil || got.Holder != "alice" || got.Token != rec.Token {
		t.Fatalf("Get after Acquire = %+v, %v; want alice with token %d", got, err, rec.Token)
	}
}

func testAcquireHeld(t *testing.T, open func(*testing.T) lease.Backend, o Options) {
	a, b := open(t), open(t)
	name := NewName()
	rec := mustAcquire(t, a, name, "alice", 10*o.TTL)
	for _, c := range []struct {
		backend lease.Backend
		holder  string
	}{{b, "bob"}, {a, "bob"}, {a, "alice"}, {b, "alice"}} {
		got, err := c.backend.Acquire(testCtx(t), name, c.holder, o.TTL)
		if !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("Acquire by %q of a held lease: err %v, want ErrHeld", c.holder, err)
		}
		if got.Holder != "alice" || got.Token != rec.Token {
			t.Errorf("Acquire by %q returned %+v, want alice's record with token %d", c.holder, got, rec.Token)
		}
	}
}

func testRenew(t *testing.T, open func(*testing.T) lease.Backend, o Options) {
	b := open(t)
	name := NewName()
	// Leases of several TTLs: a loaded machine may take one TTL between
	// two calls, and the lease must still be held when the renew arrives.
	rec := mustAcquire(t, b, name, "alice", 10*o.TTL)
	ren, err := b.Renew(testCtx(t), name, "alice", rec.Token, 20*o.TTL)
	if err != nil || ren.Token != rec.Token || ren.Holder != "alice" {
		t.Fatalf("Renew = %+v, %v; want alice, token %d", ren, err, rec.Token)
	}
	if !ren.Expiry.After(rec.Expiry) {
		t.Errorf("Renew did not extend the expiry: %v then %v", rec.Expiry, ren.Expiry)
	}
	if _, err := b.Renew(testCtx(t), name, "alice", rec.Token+1, o.TTL); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Renew with a wrong token: err %v, want ErrLost", err)
	}
	if _, err := b.Renew(testCtx(t), name, "bob", rec.Token, o.TTL); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Renew by another holder: err %v, want ErrLost", err)
	}
	if got, err := b.Get(testCtx(t), name); err != nil || got.Holder != "alice" || got.Token != rec.Token {
		t.Errorf("failed renewals changed the record: %+v, %v", got, err)
	}
}

func testRelease(t *testing.T, open func(*testing.T) lease.Backend, o Options) {
	a, b := open(t), open(t)
	name := NewName()
	rec := mustAcquire(t, a, name, "alice", 10*o.TTL)
	if err := a.Release(testCtx(t), name, "alice", rec.Token+1); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Release with a wrong token: err %v, want ErrLost", err)
	}
	if err := b.Release(testCtx(t), name, "bob", rec.Token); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Release by another holder: err %v, want ErrLost", err)
	}
	if err := a.Release(testCtx(t), name, "alice", rec.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got, err := b.Get(testCtx(t), name); err != nil || !got.Free() {
		t.Fatalf("Get after Release = %+v, %v; want free", got, err)
	}
	if err := a.Release(testCtx(t), name, "alice", rec.Token); !errors.Is(err, lease.ErrLost) {
		t.Errorf("second Release: err %v, want ErrLost", err)
	}
	if _, err := a.Renew(testCtx(t), name, "alice", rec.Token, o.TTL); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Renew after Release: err %v, want ErrLost", err)
	}
	next := mustAcquire(t, b, name, "bob", o.TTL)
	if next.Token <= rec.Token {
		t.Errorf("token after release %d, want > %d", next.Token, rec.Token)
	}
}

// testExpiry: a live holder that stops renewing loses the lease at its TTL;
// afterwards it can neither renew nor release, nor disturb the new holder.
func testExpiry(t *testing.T, open func(*testing.T) lease.Backend, o Options) {
	a, b := open(t), open(t)
	name := NewName()
	rec := mustAcquire(t, a, name, "alice", o.TTL)
	WaitFor(t, b, name, 20*o.TTL+5*time.Second, "expiry", lease.Record.Free)
	next := mustAcquire(t, b, name, "bob", 10*o.TTL)
	if next.Token <= rec.Token {
		t.Errorf("token after expiry %d, want > %d", next.Token, rec.Token)
	}
	if _, err := a.Renew(testCtx(t), name, "alice", rec.Token, o.TTL); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Renew after takeover: err %v, want ErrLost", err)
	}
	if err := a.Release(testCtx(t), name, "alice", rec.Token); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Release after takeover: err %v, want ErrLost", err)
	}
	if got, err := b.Get(testCtx(t), name); err != nil || got.Holder != "bob" || got.Token != next.Token {
		t.Errorf("the stale holder disturbed the new one: %+v, %v", got, err)
	}
}

// testCrashedHolder: a holder whose Backend is closed without Release
// (a crash) loses the lease, at the latest at its TTL.
func testCrashedHolder(t *testing.T, open func(*testing.T) lease.Backend, o Options) {
	b := open(t)
	name := NewName()
	a := open(t)
	rec := mustAcquire(t, a, name, "alice", o.TTL)
	a.Close()
	WaitFor(t, b, name, 20*o.TTL+5*time.Second, "the crashed holder's lease to free", lease.Record.Free)
	if next := mustAcquire(t, b, name, "bob", o.TTL); next.Token <= rec.Token {
		t.Errorf("token after crash %d, want > %d", next.Token, rec.Token)
	}
}

func testTokensGrow(t *testing.T, open func(*testing.T) lease.Backend, o Options) {
	backends := []lease.Backend{open(t), open(t)}
	name := NewName()
	var last uint64
	for i := range 20 {
		b := backends[i%2]
		// Several TTLs, so that the release still finds the lease held
		// on a loaded machine.
		rec := mustAcquire(t, b, name, fmt.Sprintf("holder-%d", i%3), 10*o.TTL)
		if rec.Token <= last {
			t.Fatalf("acquisition %d: token %d, want > %d", i, rec.Token, last)
		}
		last = rec.Token
		if err := b.Release(testCtx(t), name, rec.Holder, rec.Token); err != nil {
			t.Fatalf("Release %d: %v", i, err)
		}
		if got, err := b.Get(testCtx(t), name); err != nil || !got.Free() || (got.Token != 0 && got.Token < last) {
			t.Fatalf("Get after release %d = %+v, %v; want free, token 0 or >= %d", i, got, err, last)
		}
	}
}

func testWatch(t *testing.T, open func(*testing.T) lease.Backend, o Options) {
	a, w := open(t), open(t)
	name := NewName()
	ctx, cancel := context.WithCancel(testCtx(t))
	ch, err := w.Watch(ctx, name)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	timeout := 10*o.TTL + 5*time.Second
	next := func(what string, cond func(lease.Record) bool) {
		t.Helper()
		deadline := time.After(timeout)
		for {
			select {
			case rec, ok := <-ch:
				if !ok {
					t.Fatalf("watch closed while waiting for %s", what)
				}
				if cond(rec) {
					return
				}
			case <-deadline:
				t.Fatalf("no watch event for %s within %v", what, timeout)
			}
		}
	}
	next("the first (free) record", lease.Record.Free)
	rec := mustAcquire(t, a, name, "alice", 10*o.TTL)
	next("the acquisition", func(r lease.Record) bool { return r.Holder == "alice" && r.Token == rec.Token })
	if err := a.Release(testCtx(t), name, "alice", rec.Token); err != nil {
		t.Fatal(err)
	}
	next("the release", lease.Record.Free)
	cancel()
	deadline := time.After(timeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("watch channel not closed within %v of cancelling its context", timeout)
		}
	}
}

func testInvalid(t *testing.T, open func(*testing.T) lease.Backend, o Options) {
	b := open(t)
	name := NewName()
	ctx := testCtx(t)
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", what, err)
		}
	}
	_, err := b.Acquire(ctx, "", "alice", o.TTL)
	check("Acquire with an empty name", err)
	_, err = b.Acquire(ctx, name, "", o.TTL)
	check("Acquire with an empty holder", err)
	_, err = b.Acquire(ctx, name, "alice", 0)
	check("Acquire with a zero TTL", err)
	_, err = b.Renew(ctx, name, "alice", 0, o.TTL)
	check("Renew with a zero token", err)
	check("Release with a zero token", b.Release(ctx, name, "alice", 0))
	if rec, err := b.Get(ctx, name); err != nil || !rec.Free() {
		t.Errorf("invalid calls changed the lease: %+v, %v", rec, err)
	}
}

func testClosed(t *testing.T, open func(*testing.T) lease.Backend, o Options) {
	b := open(t)
	name := NewName()
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := testCtx(t)
	_, err := b.Acquire(ctx, name, "alice", o.TTL)
	if !errors.Is(err, lease.ErrClosed) {
		t.Errorf("Acquire after Close: err %v, want ErrClosed", err)
	}
	if _, err := b.Get(ctx, name); !errors.Is(err, lease.ErrClosed) {
		t.Errorf("Get after Close: err %v, want ErrClosed", err)
	}
}

// testElector runs two Electors: one is elected, resigns, and the other is
// elected with a greater token.
func testElector(t *testing.T, open func(*testing.T) lease.Backend, o Options) {
	name := NewName()
	type election struct {
		holder string
		token  uint64
	}
	elected := make(chan election, 4)
	lost := make(chan election, 4)
	electors := map[string]*lease.Elector{}
	ctx := testCtx(t)
	done := make(chan struct{}, 2)
	for _, holder := range []string{"alice", "bob"} {
		// At least 3 s: the leader must renew within two thirds of it for
		// the whole test, and a loaded machine took a store more than
		// 500 ms to answer (a late answer is a loss, rightly).
		cfg := lease.ScaledConfig(max(o.TTL*3, 3*time.Second))
		cfg.Name, cfg.Holder = name, holder
		cfg.Callbacks = lease.Callbacks{
			OnElected: func(ctx context.Context, token uint64) {
				elected <- election{holder, token}
				<-ctx.Done()
			},
			OnLost: func(token uint64, err error) {
				if err != nil {
					t.Errorf("%s lost token %d: %v (want a clean release)", holder, token, err)
				}
				lost <- election{holder, token}
			},
		}
		e, err := lease.NewElector(open(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		electors[holder] = e
		go func() { e.Run(ctx); done <- struct{}{} }()
	}
	timeout := time.After(20*o.TTL + 10*time.Second)
	var first election
	select {
	case first = <-elected:
	case <-timeout:
		t.Fatal("nobody elected")
	}
	electors[first.holder].Resign()
	var second election
	select {
	case second = <-elected:
	case <-timeout:
		t.Fatalf("%s resigned and nobody else was elected", first.holder)
	}
	if second.holder == first.holder || second.token <= first.token {
		t.Errorf("after %v resigned, elected %v; want the other holder with a greater token", first, second)
	}
	select {
	case l := <-lost:
		if l != first {
			t.Errorf("lost %v, want %v", l, first)
		}
	case <-timeout:
		t.Fatalf("%v resigned and its OnLost never came", first)
	}
	electors[second.holder].Resign()
	for range 2 {
		select {
		case <-done:
		case <-timeout:
			t.Fatal("Run did not return after Resign")
		}
	}
}

package leasetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"coord/lease"
)

// tenure is one acquisition as a contender saw it, on this process's
// monotonic clock.
type tenure struct {
	holder     string
	token      uint64
	sent       time.Time // Acquire sent
	returned   time.Time // Acquire returned
	validUntil time.Time // lower bound of the store's expiry: last successful request's send + TTL
	ended      time.Time // Release sent or Backend closed (zero: ended by expiry)
}

// heldUntil is the end of the interval in which the store certainly held
// the lease for t.
func (t *tenure) heldUntil() time.Time {
	if !t.ended.IsZero() && t.ended.Before(t.validUntil) {
		return t.ended
	}
	return t.validUntil
}

// history collects what contenders saw. Safe for concurrent use.
type history struct {
	mu       sync.Mutex
	tenures  []*tenure
	failures []string
}

func (h *history) add(t *tenure) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tenures = append(h.tenures, t)
}

func (h *history) fail(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.failures) < 50 {
		h.failures = append(h.failures, fmt.Sprintf(format, args...))
	}
}

// CheckExclusivity runs the exclusivity checker: opts.Contenders contenders,
// each with Backends of its own, compete for one lease for opts.Duration.
// A holder renews a few times, writing to a FencedResource while its lease
// is certainly valid, then at random releases, crashes (closes its Backend
// without releasing and opens a new one) or pauses past its TTL and then
// tries to write and renew with its stale token. A monitor keeps reading
// the record with Get.
//
// It fails the test when:
//   - two tenures overlap: a tenure was acquired while another, with a lower
//     token, was certainly still held (acquired, within its TTL as measured
//     from the send of its last successful request, not released or
//     crashed);
//   - tokens go backwards in real time, or one token is issued twice;
//   - a write by a holder whose lease was certainly valid is rejected, or
//     the FencedResource accepted a write with a token lower than one it
//     had seen;
//   - a renew succeeds after a pause of twice the TTL;
//   - Get returns a token lower than one whose acquisition had returned
//     before the Get was sent.
func CheckExclusivity(t *testing.T, open func(*testing.T) lease.Backend, opts Options) {
	opts = opts.withDefaults()
	t.Logf("exclusivity: %d contenders for %v, TTL %v, seed %d", opts.Contenders, opts.Duration, opts.TTL, opts.Seed)
	name := NewName()
	ctx, cancel := context.WithTimeout(context.Background(), opts.Duration+30*time.Second+20*opts.TTL)
	defer cancel()
	var (
		h        history
		resource FencedResource
		wg       sync.WaitGroup
		stop     = time.Now().Add(opts.Duration)
		gets     []getObservation
	)
	for i := range opts.Contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &contender{
				t: t, open: open, name: name, holder: fmt.Sprintf("contender-%d", i),
				ttl: opts.TTL, rng: rand.New(rand.NewPCG(opts.Seed, uint64(i))),
				h: &h, resource: &resource,
			}
			c.run(ctx, stop)
		}()
	}
	monitorDone := make(chan struct{})
	go func() {
		defer close(monitorDone)
		gets = monitor(ctx, open(t), name, stop, opts.TTL)
	}()
	wg.Wait()
	<-monitorDone

	for _, err := range resource.Check() {
		h.fail("fenced resource: %v", err)
	}
	checkTenures(&h)
	checkGets(&h, gets)
	accepted, rejected := 0, 0
	for _, w := range resource.Writes() {
		if w.Accepted {
			accepted++
		} else {
			rejected++
		}
	}
	t.Logf("exclusivity: %d tenures, %d writes accepted, %d stale writes rejected, %d reads", len(h.tenures), accepted, rejected, len(gets))
	if len(h.tenures) < 2 {
		h.fail("only %d tenures in %v: the checker checked nothing", len(h.tenures), opts.Duration)
	}
	for _, f := range h.failures {
		t.Error(f)
	}
	if len(h.failures) > 0 {
		t.Logf("replay with leasetest.Options{Seed: %d}", opts.Seed)
	}
}

// contender is one participant of the exclusivity checker. It is not safe
// for concurrent use; each runs on its own goroutine.
type contender struct {
	t        *testing.T
	open     func(*testing.T) lease.Backend
	name     string
	holder   string
	ttl      time.Duration
	rng      *rand.Rand
	h        *history
	resource *FencedResource
	backend  lease.Backend
}

func (c *contender) run(ctx context.Context, stop time.Time) {
	c.backend = c.open(c.t)
	defer func() { c.backend.Close() }()
	for time.Now().Before(stop) && ctx.Err() == nil {
		sent := time.Now()
		rec, err := c.backend.Acquire(ctx, c.name, c.holder, c.ttl)
		returned := time.Now()
		switch {
		case err == nil:
			tn := &tenure{holder: c.holder, token: rec.Token, sent: sent, returned: returned, validUntil: sent.Add(c.ttl)}
			c.h.add(tn)
			c.hold(ctx, tn)
		case errors.Is(err, lease.ErrHeld), errors.Is(err, lease.ErrUnavailable):
			// Workload pacing, not waiting for a state: retry soon.
			time.Sleep(time.Duration(c.rng.Int64N(int64(c.ttl / 5))))
		default:
			c.h.fail("%s: Acquire: unexpected error %v", c.holder, err)
			return
		}
	}
}

// hold keeps a tenure for a few renewals, then ends it one of three ways.
func (c *contender) hold(ctx context.Context, tn *tenure) {
	renewInterval := c.ttl / 5
	for range 1 + c.rng.IntN(5) {
		c.write(tn, true)
		time.Sleep(renewInterval)
		sent := time.Now()
		_, err := c.backend.Renew(ctx, c.name, c.holder, tn.token, c.ttl)
		switch {
		case err == nil:
			tn.validUntil = sent.Add(c.ttl)
		case errors.Is(err, lease.ErrLost):
			// Lost before validUntil is possible only if the store's clock
			// ran faster than ours; the overlap check decides whether it
			// matters.
			return
		case errors.Is(err, lease.ErrUnavailable):
		default:
			c.h.fail("%s: Renew: unexpected error %v", c.holder, err)
			return
		}
	}
	switch p := c.rng.IntN(10); {
	case p < 6:
		tn.ended = time.Now()
		if err := c.backend.Release(ctx, c.name, c.holder, tn.token); err != nil && !errors.Is(err, lease.ErrLost) {
			c.h.fail("%s: Release: %v", c.holder, err)
		}
	case p < 8:
		tn.ended = time.Now() // a crash: Close without Release
		c.backend.Close()
		c.backend = c.open(c.t)
	default:
		// A pause (GC, SIGSTOP) twice as long as the TTL, after which the
		// holder acts on its stale belief: its write must be rejected if
		// anyone wrote with a higher token, and its renew must fail.
		time.Sleep(2 * c.ttl)
		c.write(tn, false)
		if _, err := c.backend.Renew(ctx, c.name, c.holder, tn.token, c.ttl); err == nil {
			c.h.fail("%s: Renew of token %d succeeded after a pause of %v (TTL %v)", c.holder, tn.token, 2*c.ttl, c.ttl)
		}
		// Give it back if nobody took it, so the next holder needn't wait.
		c.backend.Release(ctx, c.name, c.holder, tn.token)
	}
}

// write writes to the fenced resource. certain says the holder's lease is
// known valid; a rejection that comes back while it still is means someone
// with a higher token wrote during this holder's lease.
func (c *contender) write(tn *tenure, certain bool) {
	err := c.resource.Write(tn.token, c.holder)
	if after := time.Now(); certain && err != nil && after.Before(tn.validUntil) {
		c.h.fail("%s: write with token %d rejected while its lease was valid for another %v: %v", c.holder, tn.token, tn.validUntil.Sub(after), err)
	}
}

// getObservation is one Get by the monitor.
type getObservation struct {
	sent, returned time.Time
	rec            lease.Record
}

// monitor reads the record with Get until stop, a bounded number of times.
func monitor(ctx context.Context, b lease.Backend, name string, stop time.Time, ttl time.Duration) []getObservation {
	var obs []getObservation
	for i := 0; i < 10000 && time.Now().Before(stop) && ctx.Err() == nil; i++ {
		sent := time.Now()
		rec, err := b.Get(ctx, name)
		if err == nil {
			obs = append(obs, getObservation{sent, time.Now(), rec})
		}
		time.Sleep(ttl / 20)
	}
	return obs
}

// checkTenures checks token order and overlaps.
func checkTenures(h *history) {
	ts := h.tenures
	sort.Slice(ts, func(i, j int) bool { return ts[i].token < ts[j].token })
	for i := 1; i < len(ts); i++ {
		if ts[i].token == ts[i-1].token {
			h.fail("token %d issued twice: to %s and to %s", ts[i].token, ts[i-1].holder, ts[i].holder)
		}
	}
	for _, a := range ts {
		for _, b := range ts {
			if a.token >= b.token {
				continue
			}
			// Tokens must grow in real time.
			if b.returned.Before(a.sent) {
				h.fail("token %d (%s) returned before token %d (%s) was requested", b.token, b.holder, a.token, a.holder)
			}
			// b's acquisition committed by b.returned; a certainly held
			// the lease until a.heldUntil().
			if a.sent.Before(b.returned) && b.returned.Before(a.heldUntil()) {
				h.fail("two holders: %s acquired token %d while %s still held token %d for another %v",
					b.holder, b.token, a.holder, a.token, a.heldUntil().Sub(b.returned))
			}
		}
	}
}

// checkGets checks that reads never go back in time.
func checkGets(h *history, gets []getObservation) {
	for _, g := range gets {
		for _, tn := range h.tenures {
			if tn.returned.Before(g.sent) && g.rec.Token != 0 && g.rec.Token < tn.token {
				h.fail("Get sent %v after token %d was issued returned token %d", g.sent.Sub(tn.returned), tn.token, g.rec.Token)
			}
		}
	}
}

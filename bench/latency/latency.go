package latency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"time"

	"coord/bench"
	"coord/lease"
)

// ErrInvalid means an argument is out of range.
var ErrInvalid = errors.New("latency: invalid argument")

// pinger is implemented by backends that can make one plain round trip to
// their store (a GET, a SELECT 1): the reference beside which the lease
// operations are reported.
type pinger interface {
	Ping(ctx context.Context) error
}

// Stats summarises one operation on one store.
type Stats struct {
	Store    string  `json:"store"`
	Op       string  `json:"op"`
	N        int     `json:"n"`
	Errors   int     `json:"errors"`
	MedianUS float64 `json:"median_us"`
	P99US    float64 `json:"p99_us"`
}

// Ops are the operations measured, in the order reported; "ping" is the
// store's plain round trip.
var Ops = []string{"acquire", "renew", "release", "ping"}

// Measure runs iterations on one store through b (store is its URL, for
// the report), after ten iterations of warm-up: each acquires a lease name
// of its own with ttl, renews it, releases it and pings the store, if b
// can (a Ping method), so that the four operations see the same
// conditions. A failed operation is counted, not timed; a store that
// fails more than half its acquisitions is an error.
func Measure(ctx context.Context, b lease.Backend, store string, iterations int, ttl time.Duration) ([]Stats, error) {
	if iterations < 1 || ttl <= 0 {
		return nil, fmt.Errorf("%w: iterations %d and ttl %v must be positive", ErrInvalid, iterations, ttl)
	}
	samples := map[string][]time.Duration{}
	failures := map[string]int{}
	timed := func(op string, call func(context.Context) error) bool {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		err := call(octx)
		if err != nil {
			failures[op]++
			return false
		}
		samples[op] = append(samples[op], time.Since(start))
		return true
	}
	_, canPing := b.(pinger)
	holder := fmt.Sprintf("bench-%d", os.Getpid())
	const warmup = 10
	for i := -warmup; i < iterations; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("bench-latency-%d-%d", os.Getpid(), i+warmup)
		var rec lease.Record
		ok := timed("acquire", func(ctx context.Context) (err error) {
			rec, err = b.Acquire(ctx, name, holder, ttl)
			return err
		})
		if ok {
			timed("renew", func(ctx context.Context) error {
				_, err := b.Renew(ctx, name, holder, rec.Token, ttl)
				return err
			})
			timed("release", func(ctx context.Context) error { return b.Release(ctx, name, holder, rec.Token) })
		}
		if canPing {
			timed("ping", func(ctx context.Context) error { return b.(pinger).Ping(ctx) })
		}
		if i == -1 { // the warm-up's samples are dropped
			clear(samples)
			clear(failures)
		}
	}
	if failures["acquire"] > iterations/2 {
		return nil, fmt.Errorf("latency: %s: %d of %d acquisitions failed", Redact(store), failures["acquire"], iterations)
	}
	var out []Stats
	for _, op := range Ops {
		s := Stats{Store: Redact(store), Op: op, N: len(samples[op]), Errors: failures[op]}
		if s.N == 0 && s.Errors == 0 {
			continue // a store without Ping
		}
		if s.N > 0 {
			sorted := slices.Clone(samples[op])
			slices.Sort(sorted)
			s.MedianUS = float64(bench.Percentile(sorted, 50).Nanoseconds()) / 1000
			s.P99US = float64(bench.Percentile(sorted, 99).Nanoseconds()) / 1000
		}
		out = append(out, s)
	}
	return out, nil
}

// WriteText prints results as a table, each operation's median also as a
// multiple of its store's plain round trip.
func WriteText(w io.Writer, iterations int, ttl time.Duration, results []Stats) {
	fmt.Fprintf(w, "Lease operation latency, %d iterations per store, TTL %v\n", iterations, ttl)
	fmt.Fprintf(w, "machine: %s\n\n", bench.Machine())
	fmt.Fprintf(w, "%-8s %-8s %10s %10s %10s  %s\n", "store", "op", "median", "p99", "÷ping", "url")
	pingMedian := map[string]float64{}
	for _, r := range results {
		if r.Op == "ping" {
			pingMedian[r.Store] = r.MedianUS
		}
	}
	for _, r := range results {
		ratio := "-"
		if p := pingMedian[r.Store]; p > 0 && r.Op != "ping" && r.N > 0 {
			ratio = fmt.Sprintf("%.1fx", r.MedianUS/p)
		}
		scheme := r.Store
		if u, err := url.Parse(r.Store); err == nil {
			scheme = u.Scheme
		}
		fmt.Fprintf(w, "%-8s %-8s %10s %10s %10s  %s", scheme, r.Op, fmtUS(r.MedianUS), fmtUS(r.P99US), ratio, r.Store)
		if r.Errors > 0 {
			fmt.Fprintf(w, "  (%d failed)", r.Errors)
		}
		fmt.Fprintln(w)
	}
}

// fmtUS formats microseconds for a table: µs below a millisecond.
func fmtUS(us float64) string {
	if us < 1000 {
		return fmt.Sprintf("%.0fµs", us)
	}
	return fmt.Sprintf("%.2fms", us/1000)
}

// Redact hides a store URL's password.
func Redact(store string) string {
	u, err := url.Parse(store)
	if err != nil {
		return store
	}
	return u.Redacted()
}

package leasemetrics

import (
	"context"
	"errors"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"coord/lease"
)

// Metrics are one participant's metrics, in a registry of their own.
//
// Metrics is safe for concurrent use: the Backend it wraps is called from
// the Elector's goroutines, its callbacks from others, and Handler from the
// HTTP server's.
type Metrics struct {
	registry *prometheus.Registry
	now      func() time.Time
	holder   string

	isLeader       prometheus.Gauge
	elected        prometheus.Counter
	lost           *prometheus.CounterVec
	released       prometheus.Counter
	leaderChanges  prometheus.Counter
	token          prometheus.Gauge
	observedToken  prometheus.Gauge
	expiry         prometheus.Gauge
	lastRenewStamp prometheus.Gauge
	renewSeconds   *prometheus.HistogramVec
	acquireSeconds *prometheus.HistogramVec

	mu         sync.Mutex
	lastRenew  time.Time // when the last successful acquire or renew was sent
	lastHolder string
	lastToken  uint64
	// ended is the token of the last tenure OnLost ended. The Elector
	// calls OnElected on a goroutine of its own, which may run after
	// OnLost of the same tenure: it must not then show a tenure that is
	// over as held.
	ended uint64
}

// latencyBuckets span a local lock file's fraction of a millisecond to a
// slow store's seconds.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2.5, 14) // 100 µs .. about 15 s

// New returns the metrics of holder's participation in the election for
// lease name, over a store whose URL scheme is scheme.
func New(name, holder, scheme string) *Metrics {
	labels := prometheus.Labels{"lease": name}
	m := &Metrics{registry: prometheus.NewRegistry(), now: time.Now, holder: holder}
	gauge := func(metric, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: metric, Help: help, ConstLabels: labels})
	}
	counter := func(metric, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: metric, Help: help, ConstLabels: labels})
	}
	m.isLeader = gauge("coord_elector_is_leader", "1 while this participant holds the lease, else 0.")
	m.elected = counter("coord_elector_elected_total", "Tenures begun by this participant.")
	m.lost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coord_elector_lost_total", ConstLabels: labels,
		Help: "Tenures ended other than by resigning: reason lost (the store gave the lease to another) or deadline (not renewed within the renew deadline)."},
		[]string{"reason"})
	m.released = counter("coord_elector_released_total", "Tenures ended by resigning (the lease handed back).")
	m.leaderChanges = counter("coord_elector_leader_changes_total", "Changes of the observed holder or token, to anyone or to free.")
	m.token = gauge("coord_elector_token", "Fencing token of this participant's tenure; 0 when not leading.")
	m.observedToken = gauge("coord_elector_observed_token", "Fencing token of the holder last observed, anyone's; 0 when free.")
	m.expiry = gauge("coord_elector_lease_expiry_timestamp_seconds", "When this participant's tenure expires unless renewed, on its clock; 0 when not leading.")
	m.lastRenewStamp = gauge("coord_elector_last_renew_timestamp_seconds", "When the last successful acquire or renew was sent; 0 if none.")
	m.renewSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coord_elector_renew_seconds", ConstLabels: labels,
		Help: "Renew calls at the store, by result: ok, lost or error.", Buckets: latencyBuckets}, []string{"result"})
	m.acquireSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coord_elector_acquire_seconds", ConstLabels: labels,
		Help: "Acquire calls at the store, by result: ok, held or error.", Buckets: latencyBuckets}, []string{"result"})
	since := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coord_elector_seconds_since_last_renew", ConstLabels: labels,
		Help: "Seconds since the last successful acquire or renew was sent, at the scrape; +Inf if none."}, m.secondsSinceRenew)
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "coord_elector_info", Help: "1, naming this participant and its store's URL scheme.",
		ConstLabels: prometheus.Labels{"lease": name, "holder": holder, "store": scheme}})
	info.Set(1)
	m.registry.MustRegister(m.isLeader, m.elected, m.lost, m.released, m.leaderChanges, m.token, m.observedToken,
		m.expiry, m.lastRenewStamp, m.renewSeconds, m.acquireSeconds, since, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Both reasons are shown from the start, at 0, so that a rate needs no
	// first loss to exist.
	m.lost.WithLabelValues("lost")
	m.lost.WithLabelValues("deadline")
	return m
}

// Registry returns the registry the metrics are in.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

func (m *Metrics) secondsSinceRenew() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lastRenew.IsZero() {
		return math.Inf(1)
	}
	return m.now().Sub(m.lastRenew).Seconds()
}

// renewed notes a successful acquire or renew sent at sent.
func (m *Metrics) renewed(sent time.Time) {
	m.mu.Lock()
	m.lastRenew = sent
	m.mu.Unlock()
	m.lastRenewStamp.Set(float64(sent.UnixNano()) / 1e9)
}

// Callbacks returns callbacks that record each event, then call next's.
func (m *Metrics) Callbacks(next lease.Callbacks) lease.Callbacks {
	return lease.Callbacks{
		OnElected: func(ctx context.Context, token uint64) {
			m.elected.Inc()
			m.mu.Lock()
			if token != m.ended {
				m.isLeader.Set(1)
				m.token.Set(float64(token))
			}
			m.mu.Unlock()
			if next.OnElected != nil {
				next.OnElected(ctx, token)
			}
		},
		OnLost: func(token uint64, err error) {
			m.mu.Lock()
			m.ended = token
			m.isLeader.Set(0)
			m.token.Set(0)
			m.expiry.Set(0)
			m.mu.Unlock()
			switch {
			case err == nil:
				m.released.Inc()
			case errors.Is(err, lease.ErrLost):
				m.lost.WithLabelValues("lost").Inc()
			default:
				m.lost.WithLabelValues("deadline").Inc()
			}
			if next.OnLost != nil {
				next.OnLost(token, err)
			}
		},
		OnRenewed: func(r lease.Record) {
			m.mu.Lock()
			if r.Token != m.ended {
				m.expiry.Set(float64(r.Expiry.UnixNano()) / 1e9)
			}
			m.mu.Unlock()
			if next.OnRenewed != nil {
				next.OnRenewed(r)
			}
		},
		OnLeaderChanged: func(r lease.Record) {
			m.mu.Lock()
			changed := r.Holder != m.lastHolder || r.Token != m.lastToken
			m.lastHolder, m.lastToken = r.Holder, r.Token
			m.observedToken.Set(float64(r.Token))
			if r.Holder == m.holder && r.Token != m.ended && !r.Expiry.IsZero() {
				// Our own record arrives here before OnElected: its
				// expiry is the new tenure's. Another holder's is not
				// ours to show.
				m.expiry.Set(float64(r.Expiry.UnixNano()) / 1e9)
			}
			m.mu.Unlock()
			if changed {
				m.leaderChanges.Inc()
			}
			if next.OnLeaderChanged != nil {
				next.OnLeaderChanged(r)
			}
		},
	}
}

// Backend returns b with its Acquire and Renew timed. Release, Get, Watch
// and Close pass through. If b can watch its tenures (lease.TenureWatcher),
// so can the Backend returned, so that an Elector steps down as early as
// it would without metrics.
func (m *Metrics) Backend(b lease.Backend) lease.Backend {
	t := &timed{Backend: b, m: m}
	if tw, ok := b.(lease.TenureWatcher); ok {
		return &timedTenure{timed: t, TenureWatcher: tw}
	}
	return t
}

// timed is a Backend whose Acquire and Renew are timed.
type timed struct {
	lease.Backend
	m *Metrics
}

func (t *timed) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (lease.Record, error) {
	sent := t.m.now()
	r, err := t.Backend.Acquire(ctx, name, holder, ttl)
	result := "ok"
	switch {
	case err == nil:
		t.m.renewed(sent)
	case errors.Is(err, lease.ErrHeld):
		result = "held"
	default:
		result = "error"
	}
	t.m.acquireSeconds.WithLabelValues(result).Observe(t.m.now().Sub(sent).Seconds())
	return r, err
}

func (t *timed) Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (lease.Record, error) {
	sent := t.m.now()
	r, err := t.Backend.Renew(ctx, name, holder, token, ttl)
	result := "ok"
	switch {
	case err == nil:
		t.m.renewed(sent)
	case errors.Is(err, lease.ErrLost):
		result = "lost"
	default:
		result = "error"
	}
	t.m.renewSeconds.WithLabelValues(result).Observe(t.m.now().Sub(sent).Seconds())
	return r, err
}

// timedTenure is a timed Backend that can also watch its tenures.
type timedTenure struct {
	*timed
	lease.TenureWatcher
}

var (
	_ lease.TenureWatcher = (*timedTenure)(nil)
	_ lease.Backend       = (*timedTenure)(nil)
)

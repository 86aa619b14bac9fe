//go:build linux

package leasemetrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"coord/lease"
	"coord/lease/file"
	"coord/lease/leasemetrics"
)

// value returns the metric named name whose labels include want (a gauge's
// or counter's value, a histogram's sample count), failing if there is
// none.
func value(t *testing.T, m *leasemetrics.Metrics, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, mt := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metrics
				}
			}
			switch f.GetType() {
			case dto.MetricType_GAUGE:
				return mt.GetGauge().GetValue()
			case dto.MetricType_COUNTER:
				return mt.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				return float64(mt.GetHistogram().GetSampleCount())
			}
		}
	}
	t.Fatalf("no metric %s%v", name, want)
	return 0
}

// participant is an Elector over a lock file with its metrics, and its
// events on channels.
type participant struct {
	m       *leasemetrics.Metrics
	e       *lease.Elector
	elected chan uint64
	renewed chan lease.Record
	lost    chan error
	leaders chan lease.Record
	done    chan error
}

func start(t *testing.T, path, holder string) *participant {
	t.Helper()
	b, err := file.Open(path, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	p := &participant{
		m:       leasemetrics.New("leader.lock", holder, "file"),
		elected: make(chan uint64, 10), renewed: make(chan lease.Record, 1000),
		lost: make(chan error, 10), leaders: make(chan lease.Record, 100), done: make(chan error, 1),
	}
	cfg := lease.ScaledConfig(3 * time.Second)
	cfg.Name, cfg.Holder = "leader.lock", holder
	cfg.Callbacks = p.m.Callbacks(lease.Callbacks{
		OnElected: func(ctx context.Context, token uint64) { p.elected <- token; <-ctx.Done() },
		OnRenewed: func(r lease.Record) {
			select {
			case p.renewed <- r:
			default:
			}
		},
		OnLost: func(_ uint64, err error) { p.lost <- err },
		OnLeaderChanged: func(r lease.Record) {
			select {
			case p.leaders <- r:
			default:
			}
		},
	})
	p.e, err = lease.NewElector(p.m.Backend(b), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { p.done <- p.e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

// receive returns the next value on c, failing after a minute.
func receive[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("no %s within a minute", what)
		var zero T
		return zero
	}
}

// Two participants over a real lock file: the leader's metrics show its
// tenure, token, renewals and their latency; the watcher's show the holder
// it sees; when the leader resigns, the watcher's show its own tenure.
func TestMetricsFollowTenures(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leader.lock")
	labels := map[string]string{"lease": "leader.lock"}
	a := start(t, path, "a")
	tokA := receive(t, a.elected, "election of a")
	if got := value(t, a.m, "coord_elector_is_leader", labels); got != 1 {
		t.Errorf("a leads, is_leader = %v", got)
	}
	if got := value(t, a.m, "coord_elector_token", labels); got != float64(tokA) {
		t.Errorf("a's token gauge = %v, want %d", got, tokA)
	}
	if got := value(t, a.m, "coord_elector_elected_total", labels); got != 1 {
		t.Errorf("a's elected_total = %v, want 1", got)
	}
	if got := value(t, a.m, "coord_elector_acquire_seconds", map[string]string{"result": "ok"}); got < 1 {
		t.Errorf("a's acquire_seconds{ok} count = %v, want at least 1", got)
	}
	r := receive(t, a.renewed, "renewal of a")
	if got := value(t, a.m, "coord_elector_renew_seconds", map[string]string{"result": "ok"}); got < 1 {
		t.Errorf("after a renewal, renew_seconds{ok} count = %v", got)
	}
	since := value(t, a.m, "coord_elector_seconds_since_last_renew", labels)
	if math.IsInf(since, 0) || since < 0 || since > 60 {
		t.Errorf("seconds_since_last_renew = %v after a renewal", since)
	}
	if exp := value(t, a.m, "coord_elector_lease_expiry_timestamp_seconds", labels); exp < float64(time.Now().Add(-time.Minute).Unix()) || exp > float64(r.Expiry.Add(time.Minute).Unix()) {
		t.Errorf("expiry = %v, renewed record's %v", exp, r.Expiry)
	}

	b := start(t, path, "b")
	// b sees a (the metrics are recorded before the event is passed on).
	for r := receive(t, b.leaders, "b's view of the holder"); r.Token != tokA; r = receive(t, b.leaders, "b's view of a") {
	}
	if got := value(t, b.m, "coord_elector_observed_token", labels); got != float64(tokA) {
		t.Errorf("b's observed_token = %v, want a's %d", got, tokA)
	}
	if got := value(t, b.m, "coord_elector_is_leader", labels); got != 0 {
		t.Errorf("b watches, is_leader = %v", got)
	}
	if got := value(t, b.m, "coord_elector_seconds_since_last_renew", labels); !math.IsInf(got, 1) {
		t.Errorf("b never renewed, seconds_since_last_renew = %v, want +Inf", got)
	}

	a.e.Resign()
	if err := receive(t, a.lost, "end of a's tenure"); err != nil {
		t.Errorf("a resigned, OnLost err = %v", err)
	}
	if got := value(t, a.m, "coord_elector_released_total", labels); got != 1 {
		t.Errorf("a's released_total = %v, want 1", got)
	}
	for _, name := range []string{"coord_elector_is_leader", "coord_elector_token", "coord_elector_lease_expiry_timestamp_seconds"} {
		if got := value(t, a.m, name, labels); got != 0 {
			t.Errorf("after a resigned, its %s = %v, want 0", name, got)
		}
	}
	tokB := receive(t, b.elected, "election of b")
	if tokB <= tokA {
		t.Errorf("b's token %d not above a's %d", tokB, tokA)
	}
	if got := value(t, b.m, "coord_elector_token", labels); got != float64(tokB) {
		t.Errorf("b's token gauge = %v, want %d", got, tokB)
	}
	if got := value(t, b.m, "coord_elector_leader_changes_total", labels); got < 2 {
		t.Errorf("b saw a then itself, leader_changes_total = %v", got)
	}
}

// Losses are counted by reason; a tenure OnLost ended is not shown as held
// by its OnElected coming late (the Elector runs OnElected on a goroutine).
func TestLossReasonsAndLateElected(t *testing.T) {
	m := leasemetrics.New("x", "a", "redis")
	cb := m.Callbacks(lease.Callbacks{})
	lease1 := map[string]string{"lease": "x"}
	cb.OnElected(context.Background(), 5)
	cb.OnLost(5, fmt.Errorf("renew: %w", lease.ErrLost))
	cb.OnElected(context.Background(), 6)
	cb.OnLost(6, fmt.Errorf("%w after 3s", lease.ErrDeadline))
	cb.OnLost(7, fmt.Errorf("%w after 3s", lease.ErrDeadline))
	cb.OnElected(context.Background(), 7) // late: 7 is over
	if got := value(t, m, "coord_elector_lost_total", map[string]string{"reason": "lost"}); got != 1 {
		t.Errorf("lost_total{lost} = %v, want 1", got)
	}
	if got := value(t, m, "coord_elector_lost_total", map[string]string{"reason": "deadline"}); got != 2 {
		t.Errorf("lost_total{deadline} = %v, want 2", got)
	}
	if got := value(t, m, "coord_elector_is_leader", lease1); got != 0 {
		t.Errorf("a late OnElected of an ended tenure shows is_leader = %v", got)
	}
	if got := value(t, m, "coord_elector_info", map[string]string{"holder": "a", "store": "redis"}); got != 1 {
		t.Errorf("info = %v", got)
	}
}

// The timed Backend records a refused renewal as lost and keeps the
// wrapped Backend's TenureWatcher.
func TestBackendRecordsResults(t *testing.T) {
	raw, err := file.Open(filepath.Join(t.TempDir(), "l.lock"), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	m := leasemetrics.New("l.lock", "a", "file")
	b := m.Backend(raw)
	if _, ok := b.(lease.TenureWatcher); !ok {
		t.Error("the timed file Backend lost its TenureWatcher")
	}
	ctx := context.Background()
	rec, err := b.Acquire(ctx, "l.lock", "a", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx, "l.lock", "a", rec.Token)
	if _, err := b.Acquire(ctx, "l.lock", "b", 5*time.Second); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("second Acquire: %v, want ErrHeld", err)
	}
	if _, err := b.Renew(ctx, "l.lock", "a", rec.Token+1, 5*time.Second); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Renew with a wrong token: %v, want ErrLost", err)
	}
	for _, c := range []struct {
		name, result string
	}{{"coord_elector_acquire_seconds", "ok"}, {"coord_elector_acquire_seconds", "held"}, {"coord_elector_renew_seconds", "lost"}} {
		if got := value(t, m, c.name, map[string]string{"result": c.result}); got != 1 {
			t.Errorf("%s{result=%q} count = %v, want 1", c.name, c.result, got)
		}
	}
	if n := testutil.CollectAndCount(m.Registry(), "coord_elector_renew_seconds"); n != 1 {
		t.Errorf("renew_seconds has %d series, want 1 (lost)", n)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`coord_elector_is_leader{lease="l.lock"} 0`, `coord_elector_renew_seconds_count{lease="l.lock",result="lost"} 1`, "go_goroutines", "process_"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the handler's page lacks %q", want)
		}
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"coord/lease"
	"coord/lease/leasemetrics"
)

// metricsServer serves one participant's metrics (coord elect and coord
// run --metrics-addr) until stopped.
type metricsServer struct {
	m   *leasemetrics.Metrics
	srv *http.Server
}

// checkMetricsAddr returns a usage error naming --metrics-addr and the
// value typed unless addr is empty (no metrics) or HOST:PORT on loopback.
// The page is plain HTTP without authentication (it shows the holder and
// its fencing token), so it is served only to this machine: a scraper
// elsewhere goes through one here (an authenticating proxy, a Prometheus
// agent).
func checkMetricsAddr(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--metrics-addr %q: want HOST:PORT, e.g. 127.0.0.1:9100 (%v)", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return usagef("--metrics-addr %q: metrics are served without TLS or authentication, so only on loopback "+
			"(127.0.0.0/8, ::1, localhost); scrape them from this machine", addr)
	}
	return nil
}

// startMetrics listens on addr and serves the metrics of cfg.Holder's
// participation in the election for cfg.Name at /metrics. It returns nil
// when addr is empty. The bound address is logged, so that a port of 0
// (any free port) can be found.
func startMetrics(addr, store string, cfg lease.Config) (*metricsServer, error) {
	if addr == "" {
		return nil, nil
	}
	scheme := ""
	if u, err := url.Parse(store); err == nil {
		scheme = u.Scheme
	}
	m := leasemetrics.New(cfg.Name, cfg.Holder, scheme)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("metrics server stopped", "err", err)
		}
	}()
	slog.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return &metricsServer{m: m, srv: srv}, nil
}

// backend returns b timed by the metrics (b itself if there are none).
func (s *metricsServer) backend(b lease.Backend) lease.Backend {
	if s == nil {
		return b
	}
	return s.m.Backend(b)
}

// callbacks returns next recorded by the metrics (next itself if there are
// none).
func (s *metricsServer) callbacks(next lease.Callbacks) lease.Callbacks {
	if s == nil {
		return next
	}
	return s.m.Callbacks(next)
}

// stop closes the listener and the connections, after a last scrape has had
// a moment to finish.
func (s *metricsServer) stop() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
}

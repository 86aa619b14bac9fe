package raftlease

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"coord/client"
	"coord/internal/leasekit"
	"coord/internal/pki"
	"coord/lease"
)

const prefix = "lease/raftlease"

func init() {
	lease.Register("raft", func(_ context.Context, u *url.URL) (lease.Backend, error) { return OpenURL(u) })
}

// Options configure a Backend.
type Options struct {
	// Endpoints are the addresses of cluster nodes' APIs (host:port, or
	// https://host:port; see client.Config).
	Endpoints []string
	// Timeout bounds an operation whose context has no earlier deadline.
	Timeout time.Duration
	// TLS and Token are the client's (client.Config): nil and "" for a
	// cluster run with --insecure.
	TLS   *tls.Config
	Token string
	// Session makes the Backend a lease.TenureWatcher that keeps a session
	// stream to the leader for each tenure an Elector watches, so that
	// the cluster frees the lease soon after the holder's process dies
	// rather than at the end of its TTL (the package doc, "Sessions").
	Session bool
}

// The environment variables `coord cluster env` prints, which a raft://
// URL falls back on for what it does not say.
const (
	EnvEndpoints = "COORD_ENDPOINTS"
	EnvCACert    = "COORD_CACERT"
	EnvCert      = "COORD_CERT"
	EnvKey       = "COORD_KEY"
	EnvToken     = "COORD_TOKEN"
)

// OpenURL opens the Backend a raft:// URL names. What the URL leaves out
// comes from the environment (EnvEndpoints and the others).
func OpenURL(u *url.URL) (*Backend, error) { return openURL(u, os.Getenv) }

func openURL(u *url.URL, getenv func(string) string) (*Backend, error) {
	if u.Scheme != "raft" {
		return nil, fmt.Errorf("%s: %w: scheme %q, want raft", prefix, lease.ErrInvalid, u.Scheme)
	}
	bad := func(format string, args ...any) (*Backend, error) {
		return nil, fmt.Errorf("%s: %w: %s", prefix, lease.ErrInvalid, fmt.Sprintf(format, args...))
	}
	q := u.Query()
	for name := range q {
		switch name {
		case "timeout", "cacert", "cert", "key", "token_file", "tls", "session":
		default:
			return bad("unknown parameter %q (want timeout, cacert, cert, key, token_file, tls, session)", name)
		}
	}
	opts := Options{Timeout: leasekit.TimeoutDefault}
	hosts := u.Host
	if hosts == "" {
		hosts = getenv(EnvEndpoints)
	}
	for _, ep := range strings.Split(hosts, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			opts.Endpoints = append(opts.Endpoints, ep)
		}
	}
	if t := q.Get("timeout"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			return bad("timeout %q: want a positive duration", t)
		}
		opts.Timeout = d
	}
	if v := q.Get("session"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad("session %q: want true or false", v)
		}
		opts.Session = b
	}
	param := func(name, env string) string {
		if v := q.Get(name); v != "" {
			return v
		}
		return getenv(env)
	}
	caFile, certFile, keyFile := param("cacert", EnvCACert), param("cert", EnvCert), param("key", EnvKey)
	// TLS when a CA is named or an endpoint says https, unless tls=false.
	useTLS := caFile != "" || certFile != "" || strings.Contains(hosts, "https://")
	if v := q.Get("tls"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad("tls %q: want true or false", v)
		}
		useTLS = b
	}
	if useTLS {
		conf, err := pki.LoadClientConfig(caFile, certFile, keyFile)
		if err != nil {
			return bad("%v", err)
		}
		opts.TLS = conf
	}
	opts.Token = getenv(EnvToken)
	if f := q.Get("token_file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return bad("token_file: %v", err)
		}
		opts.Token = strings.TrimSpace(string(b))
	}
	return Open(opts)
}

// Open returns a Backend on the cluster at opts.Endpoints.
func Open(opts Options) (*Backend, error) {
	if len(opts.Endpoints) == 0 {
		return nil, fmt.Errorf("%s: %w: no endpoints (want raft://HOST:PORT,...)", prefix, lease.ErrInvalid)
	}
	cfg := client.DefaultConfig(opts.Endpoints...)
	cfg.TLS, cfg.Token = opts.TLS, opts.Token
	cfg.AttemptTimeout = min(cfg.AttemptTimeout, max(opts.Timeout/2, 100*time.Millisecond))
	c, err := client.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", prefix, lease.ErrInvalid, err)
	}
	return &Backend{c: c, timeout: opts.Timeout, session: opts.Session}, nil
}

// Backend is a lease.Backend on a coord cluster.
//
// Backend is safe for concurrent use.
type Backend struct {
	c       *client.Client
	timeout time.Duration
	session bool
	tenures tenures // the tenures acquired here, for sessions

	life leasekit.Lifecycle // closed by Close, which ends every watch
}

var (
	_ lease.Backend       = (*Backend)(nil)
	_ lease.TenureWatcher = (*Backend)(nil)
)

// record turns a client lease into a lease.Record, with Expiry measured
// from sent.
func record(name string, l client.Lease, sent time.Time, remaining bool) lease.Record {
	r := lease.Record{Name: name, Holder: l.Holder, Token: l.Token}
	if r.Holder == "" {
		return r
	}
	if remaining && l.Remaining >= 0 {
		r.Expiry = sent.Add(l.Remaining)
	} else {
		r.Expiry = sent.Add(l.TTL)
	}
	return r
}

// fail maps a client error to the lease contract's errors; the lease in
// the error (ErrHeld, ErrLost) becomes the returned Record.
func (b *Backend) fail(op, name string, err error) (lease.Record, error) {
	var ce *client.Error
	held := lease.Record{Name: name}
	if errors.As(err, &ce) {
		held.Holder, held.Token = ce.Holder, ce.Token
	}
	switch {
	case errors.Is(err, client.ErrHeld):
		return held, fmt.Errorf("%s: %s %q: %w (holder %q, token %d)", prefix, op, name, lease.ErrHeld, ce.Holder, ce.Token)
	case errors.Is(err, client.ErrLost):
		return held, fmt.Errorf("%s: %s %q: %w (holder %q, token %d)", prefix, op, name, lease.ErrLost, ce.Holder, ce.Token)
	case errors.Is(err, client.ErrInvalid):
		return held, fmt.Errorf("%s: %s %q: %w: %v", prefix, op, name, lease.ErrInvalid, err)
	case errors.Is(err, client.ErrUnauthenticated), errors.Is(err, client.ErrPermissionDenied):
		// The cluster answered, and will answer the same until the token
		// changes: a retry would not help.
		return held, fmt.Errorf("%s: %s %q: %w: not allowed: %v", prefix, op, name, lease.ErrInvalid, err)
	}
	return lease.Record{Name: name}, leasekit.Unavailable(prefix, op, name, err)
}

// Acquire implements lease.Backend.
func (b *Backend) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (lease.Record, error) {
	if err := leasekit.CheckAcquire(prefix, name, holder, ttl); err != nil {
		return lease.Record{}, err
	}
	if err := b.life.Check(prefix); err != nil {
		return lease.Record{}, err
	}
	ctx, cancel := leasekit.Bound(ctx, b.timeout)
	defer cancel()
	sent := time.Now()
	l, err := b.c.Acquire(ctx, name, holder, roundUp(ttl))
	if err != nil {
		return b.fail("acquire", name, err)
	}
	if b.session {
		b.tenures.acquired(tenureKey{name, l.Token}, holder)
	}
	return record(name, l, sent, false), nil
}

// roundUp makes a TTL whole milliseconds, the API's unit, never shorter.
func roundUp(ttl time.Duration) time.Duration {
	return (ttl + time.Millisecond - 1).Truncate(time.Millisecond)
}

// Renew implements lease.Backend.
func (b *Backend) Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (lease.Record, error) {
	if err := leasekit.CheckToken(prefix, name, holder, token, ttl); err != nil {
		return lease.Record{}, err
	}
	if err := b.life.Check(prefix); err != nil {
		return lease.Record{}, err
	}
	ctx, cancel := leasekit.Bound(ctx, b.timeout)
	defer cancel()
	sent := time.Now()
	l, err := b.c.Renew(ctx, name, holder, token, roundUp(ttl))
	if errors.Is(err, client.ErrLost) {
		b.tenures.ended(tenureKey{name, token})
	}
	if err != nil {
		return b.fail("renew", name, err)
	}
	return record(name, l, sent, false), nil
}

// Release implements lease.Backend.
func (b *Backend) Release(ctx context.Context, name, holder string, token uint64) error {
	if err := leasekit.CheckToken(prefix, name, holder, token, time.Nanosecond); err != nil {
		return err
	}
	if err := b.life.Check(prefix); err != nil {
		return err
	}
	ctx, cancel := leasekit.Bound(ctx, b.timeout)
	defer cancel()
	// The session watch ends first, quietly: the leader's "lost" end
	// event after the release is no news to this holder.
	b.tenures.ended(tenureKey{name, token})
	if err := b.c.Release(ctx, name, holder, token); err != nil {
		_, err = b.fail("release", name, err)
		return err
	}
	return nil
}

// Get implements lease.Backend.
func (b *Backend) Get(ctx context.Context, name string) (lease.Record, error) {
	if err := leasekit.CheckName(prefix, name); err != nil {
		return lease.Record{}, err
	}
	if err := b.life.Check(prefix); err != nil {
		return lease.Record{}, err
	}
	ctx, cancel := leasekit.Bound(ctx, b.timeout)
	defer cancel()
	sent := time.Now()
	l, err := b.c.Lease(ctx, name)
	if err != nil {
		return b.fail("get", name, err)
	}
	return record(name, l, sent, true), nil
}

// watchWait is how long one long poll waits for a change.
const watchWait = 10 * time.Second

// Watch implements lease.Backend with long polls.
func (b *Backend) Watch(ctx context.Context, name string) (<-chan lease.Record, error) {
	if err := leasekit.CheckName(prefix, name); err != nil {
		return nil, err
	}
	if err := b.life.Check(prefix); err != nil {
		return nil, err
	}
	gctx, gcancel := leasekit.Bound(ctx, b.timeout)
	sent := time.Now()
	l, err := b.c.Lease(gctx, name)
	gcancel()
	if err != nil {
		_, err = b.fail("watch", name, err)
		return nil, err
	}
	feed := leasekit.NewFeed()
	feed.Send(record(name, l, sent, true), l.Revision)
	err = b.life.Go(ctx, prefix, func(ctx context.Context) {
		defer feed.Close()
		b.watch(ctx, name, l.Revision, feed)
	})
	if err != nil {
		return nil, err
	}
	return feed.C(), nil
}

// watch long-polls the cluster from revision rev, sending every new
// revision of the lease, until a poll fails or ctx is done.
func (b *Backend) watch(ctx context.Context, name string, rev uint64, feed *leasekit.Feed) {
	for ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, watchWait+b.timeout)
		sent := time.Now()
		l, err := b.c.WatchLease(pctx, name, rev, watchWait)
		pcancel()
		if err != nil {
			return // the caller watches again if it still cares
		}
		if l.Revision != rev {
			rev = l.Revision
			feed.Send(record(name, l, sent, true), rev)
		}
	}
}

// Close implements lease.Backend: watches end, later calls fail with
// lease.ErrClosed. Leases held stay held until they expire.
func (b *Backend) Close() error {
	b.life.Close()
	return nil
}

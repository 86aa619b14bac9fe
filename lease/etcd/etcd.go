package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"coord/internal/leasekit"
	"coord/lease"
)

const prefix = "lease/etcd"

func init() { lease.Register("etcd", openURL) }

// Config configures a Backend. Start from DefaultConfig and set Endpoints.
type Config struct {
	// Endpoints are the cluster members' client URLs or host:port pairs.
	Endpoints []string

	// Prefix is prepended to every lease name to make its key.
	Prefix string

	// DialTimeout bounds the first connection to a member.
	DialTimeout time.Duration

	// Timeout bounds an operation whose context has no deadline.
	Timeout time.Duration

	// TLS, if not nil, is the client's TLS configuration: Endpoints are
	// then https:// URLs (or host:port pairs dialed with TLS).
	TLS *tls.Config
}

// DefaultConfig returns a Config with the prefix /coord/lease/ and 5 s
// timeouts. Endpoints must still be set.
func DefaultConfig() Config {
	return Config{Prefix: "/coord/lease/", DialTimeout: 5 * time.Second, Timeout: leasekit.TimeoutDefault}
}

// Validate reports every field that is wrong, wrapping lease.ErrInvalid.
func (c Config) Validate() error {
	var errs []error
	if len(c.Endpoints) == 0 {
		errs = append(errs, errors.New("Endpoints is empty"))
	}
	for _, e := range c.Endpoints {
		if strings.TrimSpace(e) == "" {
			errs = append(errs, errors.New("an endpoint is empty"))
		}
	}
	if c.DialTimeout <= 0 {
		errs = append(errs, fmt.Errorf("DialTimeout %v is not positive", c.DialTimeout))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("Timeout %v is not positive", c.Timeout))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %w: %w", prefix, lease.ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// Backend is a lease.Backend on an etcd cluster. It is safe for concurrent
// use; everything goes through one etcd client (one gRPC connection).
type Backend struct {
	cfg    Config
	client *clientv3.Client

	// leases remembers, per name, the etcd lease of the tenure this Backend
	// acquired, to save a read on Renew. A miss is read from the key.
	leasesMu sync.Mutex
	leases   map[string]tenure

	life leasekit.Lifecycle // closed by Close, which ends every watch
}

// tenure is what Renew and Release need of an acquisition.
type tenure struct {
	holder string
	token  uint64
	id     clientv3.LeaseID
	ttl    int64 // seconds granted
}

var _ lease.Backend = (*Backend)(nil)

// openURL opens etcd://host:port,host:port/?prefix=...&dial_timeout=...,
// over TLS with tls=true or any of cacert=, cert= and key= (etcdctl's
// names).
func openURL(ctx context.Context, u *url.URL) (lease.Backend, error) {
	cfg := DefaultConfig()
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.User != nil {
		return nil, fmt.Errorf("%s: %w: store URL %q: want etcd://host:port[,host:port...][?prefix=/coord/lease/]", prefix, lease.ErrInvalid, u.Redacted())
	}
	q := u.Query()
	files := leasekit.TakeTLSParams(q)
	useTLS := !files.Empty()
	for key, vals := range q {
		v := vals[len(vals)-1]
		switch key {
		case "tls":
			on, err := strconv.ParseBool(v)
			if err != nil || (!on && useTLS) {
				return nil, fmt.Errorf("%s: %w: store URL %q: tls=%q: want true, or false without cacert, cert and key", prefix, lease.ErrInvalid, u.Redacted(), v)
			}
			useTLS = on
		case "prefix":
			cfg.Prefix = v
		case "dial_timeout":
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w: store URL %q: dial_timeout: %v", prefix, lease.ErrInvalid, u.Redacted(), err)
			}
			cfg.DialTimeout = d
		default:
			return nil, fmt.Errorf("%s: %w: store URL %q: unknown parameter %q (known: prefix, dial_timeout, tls, cacert, cert, key)", prefix, lease.ErrInvalid, u.Redacted(), key)
		}
	}
	scheme := "http://"
	if useTLS {
		// The server name is left to the dialer: it verifies each
		// endpoint's certificate against the host of that endpoint.
		tlsConfig, err := files.Config(prefix, "")
		if err != nil {
			return nil, err
		}
		cfg.TLS, scheme = tlsConfig, "https://"
	}
	for _, h := range strings.Split(u.Host, ",") {
		cfg.Endpoints = append(cfg.Endpoints, scheme+h)
	}
	return Open(ctx, cfg)
}

// Open connects to the cluster and checks, within ctx, that it answers; a
// cluster that does not is an error wrapping lease.ErrUnavailable.
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		// Notice a dead connection within seconds, not at the next request.
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		Logger:               zap.NewNop(),
		TLS:                  cfg.TLS,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", prefix, lease.ErrInvalid, err)
	}
	b := &Backend{cfg: cfg, client: client, leases: map[string]tenure{}}
	pctx, cancel := leasekit.Bound(ctx, cfg.Timeout)
	defer cancel()
	if _, err := client.Get(pctx, cfg.Prefix+"ping"); err != nil {
		client.Close()
		if cfg.TLS != nil {
			if perr := tlsProbe(ctx, cfg.Endpoints, cfg.TLS); perr != nil {
				err = fmt.Errorf("%w; %w", err, perr)
			}
		}
		return nil, leasekit.Unavailable(prefix, "open", strings.Join(cfg.Endpoints, ","), err)
	}
	return b, nil
}

func (b *Backend) key(name string) string { return b.cfg.Prefix + name }

// seconds rounds ttl up to whole seconds: etcd's unit, and never less than
// the holder was told.
func seconds(ttl time.Duration) int64 { return int64((ttl + time.Second - 1) / time.Second) }

// record makes a Record of a key, with Expiry from the remaining TTL of its
// etcd lease (one more request) measured from sent.
func (b *Backend) record(ctx context.Context, name string, kv *mvccpb.KeyValue, sent time.Time) (lease.Record, error) {
	if kv == nil {
		return lease.Record{Name: name}, nil
	}
	rec := lease.Record{Name: name, Holder: string(kv.Value), Token: uint64(kv.CreateRevision)}
	if rec.Holder == "" {
		return lease.Record{}, fmt.Errorf("%s: lease %q: %w: key %s has an empty value", prefix, name, lease.ErrCorrupt, kv.Key)
	}
	if kv.Lease != 0 {
		ttl, err := b.client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			return lease.Record{}, err
		}
		if ttl.TTL > 0 {
			rec.Expiry = sent.Add(time.Duration(ttl.TTL) * time.Second)
		}
	}
	return rec, nil
}

// Acquire implements lease.Backend.
func (b *Backend) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (lease.Record, error) {
	if err := leasekit.CheckAcquire(prefix, name, holder, ttl); err != nil {
		return lease.Record{}, err
	}
	if err := b.life.Check(prefix); err != nil {
		return lease.Record{}, err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	sent := time.Now()
	grant, err := b.client.Grant(ctx, seconds(ttl))
	if err != nil {
		return lease.Record{}, b.fail("acquire", name, err)
	}
	key := b.key(name)
	resp, err := b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, holder, clientv3.WithLease(grant.ID))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		b.revoke(ctx, grant.ID)
		return lease.Record{}, b.fail("acquire", name, err)
	}
	if resp.Succeeded {
		token := uint64(resp.Header.Revision) // the key's create revision
		b.remember(name, tenure{holder: holder, token: token, id: grant.ID, ttl: grant.TTL})
		return lease.Record{Name: name, Holder: holder, Token: token, Expiry: sent.Add(time.Duration(grant.TTL) * time.Second)}, nil
	}
	b.revoke(ctx, grant.ID)
	var kv *mvccpb.KeyValue
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		kv = kvs[0]
	}
	rec, err := b.record(ctx, name, kv, sent)
	if err != nil {
		return lease.Record{}, b.fail("acquire", name, err)
	}
	if rec.Free() {
		// The key expired between the compare and the read: say held
		// anyway (the attempt did fail), and let the caller retry.
		return rec, fmt.Errorf("%s: acquire %q: %w (freed while acquiring; retry)", prefix, name, lease.ErrHeld)
	}
	return rec, fmt.Errorf("%s: acquire %q: %w (holder %q, token %d)", prefix, name, lease.ErrHeld, rec.Holder, rec.Token)
}

// Renew implements lease.Backend.
func (b *Backend) Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (lease.Record, error) {
	if err := leasekit.CheckToken(prefix, name, holder, token, ttl); err != nil {
		return lease.Record{}, err
	}
	if err := b.life.Check(prefix); err != nil {
		return lease.Record{}, err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	sent := time.Now()
	key := b.key(name)
	t, ok := b.recall(name, holder, token)
	if !ok {
		// Acquired through another Backend: find the etcd lease on the key.
		resp, err := b.client.Get(ctx, key)
		if err != nil {
			return lease.Record{}, b.fail("renew", name, err)
		}
		if len(resp.Kvs) == 0 || !owns(resp.Kvs[0], holder, token) {
			return b.lost(ctx, "renew", name, token, firstKV(resp.Kvs), sent)
		}
		t = tenure{holder: holder, token: token, id: clientv3.LeaseID(resp.Kvs[0].Lease)}
	}
	if want := seconds(ttl); t.ttl != 0 && want > t.ttl {
		return b.rebind(ctx, name, holder, t, want, sent)
	}
	ka, err := b.client.KeepAliveOnce(ctx, t.id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		b.forget(name, token)
		return b.lost(ctx, "renew", name, token, nil, sent)
	}
	if err != nil {
		return lease.Record{}, b.fail("renew", name, err)
	}
	// The etcd lease lives; check that it still carries our key.
	resp, err := b.client.Get(ctx, key)
	if err != nil {
		return lease.Record{}, b.fail("renew", name, err)
	}
	kv := firstKV(resp.Kvs)
	if kv == nil || !owns(kv, holder, token) || clientv3.LeaseID(kv.Lease) != t.id {
		b.forget(name, token)
		if kv == nil || clientv3.LeaseID(kv.Lease) != t.id {
			b.revoke(ctx, t.id) // it carries no key of ours: an orphan
		}
		return b.lost(ctx, "renew", name, token, kv, sent)
	}
	t.ttl = ka.TTL
	b.remember(name, t)
	return lease.Record{Name: name, Holder: holder, Token: token, Expiry: sent.Add(time.Duration(ka.TTL) * time.Second)}, nil
}

// rebind moves the key to a new etcd lease of ttlSeconds, for a Renew that
// asks for more than the current etcd lease was granted.
func (b *Backend) rebind(ctx context.Context, name, holder string, t tenure, ttlSeconds int64, sent time.Time) (lease.Record, error) {
	grant, err := b.client.Grant(ctx, ttlSeconds)
	if err != nil {
		return lease.Record{}, b.fail("renew", name, err)
	}
	key := b.key(name)
	resp, err := b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", int64(t.token)),
			clientv3.Compare(clientv3.Value(key), "=", holder),
			clientv3.Compare(clientv3.LeaseValue(key), "=", t.id)).
		Then(clientv3.OpPut(key, holder, clientv3.WithLease(grant.ID))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		b.revoke(ctx, grant.ID)
		return lease.Record{}, b.fail("renew", name, err)
	}
	if !resp.Succeeded {
		b.revoke(ctx, grant.ID)
		b.forget(name, t.token)
		return b.lost(ctx, "renew", name, t.token, firstKV(resp.Responses[0].GetResponseRange().Kvs), sent)
	}
	b.revoke(ctx, t.id)
	b.remember(name, tenure{holder: holder, token: t.token, id: grant.ID, ttl: grant.TTL})
	return lease.Record{Name: name, Holder: holder, Token: t.token, Expiry: sent.Add(time.Duration(grant.TTL) * time.Second)}, nil
}

// Release implements lease.Backend.
func (b *Backend) Release(ctx context.Context, name, holder string, token uint64) error {
	if err := leasekit.CheckToken(prefix, name, holder, token, time.Nanosecond); err != nil {
		return err
	}
	if err := b.life.Check(prefix); err != nil {
		return err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	sent := time.Now()
	key := b.key(name)
	resp, err := b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", int64(token)),
			clientv3.Compare(clientv3.Value(key), "=", holder)).
		Then(clientv3.OpGet(key), clientv3.OpDelete(key)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return b.fail("release", name, err)
	}
	kv := firstKV(resp.Responses[0].GetResponseRange().Kvs)
	b.forget(name, token)
	if !resp.Succeeded {
		_, err := b.lost(ctx, "release", name, token, kv, sent)
		return err
	}
	if kv != nil && kv.Lease != 0 {
		b.revoke(ctx, clientv3.LeaseID(kv.Lease))
	}
	return nil
}

// Get implements lease.Backend.
func (b *Backend) Get(ctx context.Context, name string) (lease.Record, error) {
	if err := leasekit.CheckName(prefix, name); err != nil {
		return lease.Record{}, err
	}
	rec, _, err := b.get(ctx, name)
	return rec, err
}

// get reads name's record and the revision it was read at.
func (b *Backend) get(ctx context.Context, name string) (lease.Record, int64, error) {
	if err := b.life.Check(prefix); err != nil {
		return lease.Record{}, 0, err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	sent := time.Now()
	resp, err := b.client.Get(ctx, b.key(name))
	if err != nil {
		return lease.Record{}, 0, b.fail("get", name, err)
	}
	rec, err := b.record(ctx, name, firstKV(resp.Kvs), sent)
	if err != nil {
		return lease.Record{}, 0, b.fail("get", name, err)
	}
	return rec, resp.Header.Revision, nil
}

// Ping makes one plain round trip to the cluster (a Get), the reference
// beside which `coord bench latency` reports the lease operations.
func (b *Backend) Ping(ctx context.Context) error {
	if err := b.life.Check(prefix); err != nil {
		return err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	if _, err := b.client.Get(ctx, b.cfg.Prefix+"ping"); err != nil {
		return b.fail("ping", "", err)
	}
	return nil
}

// Close implements lease.Backend: it ends every watch and closes the
// client. It revokes nothing: a holder that closes without Release keeps
// its lease until the TTL.
func (b *Backend) Close() error {
	if !b.life.Close() {
		return nil
	}
	if err := b.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: close: %w", prefix, err)
	}
	return nil
}

// lost returns the current record (from kv, or read if kv is nil) with an
// error wrapping lease.ErrLost.
func (b *Backend) lost(ctx context.Context, op, name string, token uint64, kv *mvccpb.KeyValue, sent time.Time) (lease.Record, error) {
	var rec lease.Record
	var err error
	if kv != nil {
		rec, err = b.record(ctx, name, kv, sent)
	} else {
		rec, _, err = b.get(ctx, name)
	}
	if err != nil {
		rec = lease.Record{Name: name} // the verdict stands; only the report is missing
	}
	return rec, fmt.Errorf("%s: %s %q token %d: %w (now holder %q, token %d)", prefix, op, name, token, lease.ErrLost, rec.Holder, rec.Token)
}

// revoke revokes an etcd lease we no longer need, best effort: if it
// fails, the etcd lease expires at its TTL.
func (b *Backend) revoke(ctx context.Context, id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = b.client.Revoke(ctx, id)
}

func (b *Backend) remember(name string, t tenure) {
	b.leasesMu.Lock()
	defer b.leasesMu.Unlock()
	b.leases[name] = t
}

func (b *Backend) recall(name, holder string, token uint64) (tenure, bool) {
	b.leasesMu.Lock()
	defer b.leasesMu.Unlock()
	t, ok := b.leases[name]
	return t, ok && t.token == token && t.holder == holder
}

func (b *Backend) forget(name string, token uint64) {
	b.leasesMu.Lock()
	defer b.leasesMu.Unlock()
	if t, ok := b.leases[name]; ok && t.token == token {
		delete(b.leases, name)
	}
}

// fail wraps a client error: the outcome is unknown, lease.ErrUnavailable.
// (A corrupt record is already lease.ErrCorrupt.)
func (b *Backend) fail(op, name string, err error) error {
	if errors.Is(err, lease.ErrCorrupt) {
		return fmt.Errorf("%s: %s %q: %w", prefix, op, name, err)
	}
	return leasekit.Unavailable(prefix, op, name, err)
}

func owns(kv *mvccpb.KeyValue, holder string, token uint64) bool {
	return uint64(kv.CreateRevision) == token && string(kv.Value) == holder
}

func firstKV(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}

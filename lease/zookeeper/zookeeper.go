package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"coord/internal/leasekit"
	"coord/lease"
)

const prefix = "lease/zookeeper"

func init() { lease.Register("zk", openURL) }

// Config configures a Backend. Start from DefaultConfig and set Servers.
type Config struct {
	// Servers are the ensemble's client addresses, host:port.
	Servers []string

	// Chroot is the node under which the lease nodes live, one child per
	// lease name. It must exist ("/" always does).
	Chroot string

	// User and Password, if User is set, authenticate the Backend with
	// ZooKeeper's digest scheme, and the lease nodes it creates are
	// readable and writable by that user alone. Without them the nodes
	// are open to every client (world:anyone).
	User, Password string

	// SessionTimeout is the timeout of the Backend's shared session, the
	// one that reads and watches. A tenure's session has the lease's TTL
	// instead.
	SessionTimeout time.Duration

	// Timeout bounds Open, and an operation whose context has no deadline.
	Timeout time.Duration

	// Logger receives the zk client's log at debug level. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns a Config with the root as chroot, a 10 s shared
// session and 5 s timeouts. Servers must still be set.
func DefaultConfig() Config {
	return Config{Chroot: "/", SessionTimeout: 10 * time.Second, Timeout: leasekit.TimeoutDefault}
}

// Validate reports every field that is wrong, wrapping lease.ErrInvalid.
func (c Config) Validate() error {
	var errs []error
	if len(c.Servers) == 0 {
		errs = append(errs, errors.New("Servers is empty"))
	}
	for _, s := range c.Servers {
		if err := checkServer(s); err != nil {
			errs = append(errs, err)
		}
	}
	if err := checkChroot(c.Chroot); err != nil {
		errs = append(errs, err)
	}
	if c.User == "" && c.Password != "" {
		errs = append(errs, errors.New("Password without User"))
	}
	if strings.Contains(c.User, ":") {
		errs = append(errs, errors.New("User contains ':'"))
	}
	if c.SessionTimeout <= 0 || c.SessionTimeout > sessionTimeoutMax {
		errs = append(errs, fmt.Errorf("SessionTimeout %v is not in (0, %v]", c.SessionTimeout, sessionTimeoutMax))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("Timeout %v is not positive", c.Timeout))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %w: %w", prefix, lease.ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// sessionTimeoutMax is the longest session timeout the protocol can ask
// for (milliseconds in an int32); servers grant far less (40 s by default).
const sessionTimeoutMax = math.MaxInt32 * time.Millisecond

// checkServer checks one host:port.
func checkServer(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("server %q: %v", s, err)
	}
	if host == "" {
		return fmt.Errorf("server %q: empty host", s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("server %q: port %q is not in 1-65535", s, port)
	}
	return nil
}

// Backend is a lease.Backend on a ZooKeeper ensemble. It is safe for
// concurrent use. It keeps one shared session for reads and watches, and
// one session per lease it holds (see the package doc).
type Backend struct {
	cfg    Config
	acl    []zk.ACL
	shared *session

	mu      sync.Mutex
	tenures map[string]*tenure // by lease name: the latest acquisition here
	closed  bool               // Close has begun: sessions close at once

	closing sync.WaitGroup     // sessions being closed in the background
	life    leasekit.Lifecycle // closed by Close, which ends every watch
}

var _ lease.Backend = (*Backend)(nil)

// openURL opens zk://[user:password@]host:port[,host:port...][/chroot][?session_timeout=10s&timeout=5s].
func openURL(ctx context.Context, u *url.URL) (lease.Backend, error) {
	cfg := DefaultConfig()
	bad := func(why string) error {
		return fmt.Errorf("%s: %w: store URL %q: %s", prefix, lease.ErrInvalid, u.Redacted(), why)
	}
	if u.Host == "" || u.Opaque != "" {
		return nil, bad("want zk://[user:password@]host:port[,host:port...][/chroot][?session_timeout=10s&timeout=5s]")
	}
	cfg.Servers = strings.Split(u.Host, ",")
	if u.Path != "" {
		cfg.Chroot = u.Path
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	for key, vals := range u.Query() {
		v := vals[len(vals)-1]
		switch key {
		case "session_timeout", "timeout":
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, bad(fmt.Sprintf("%s: %v", key, err))
			}
			if key == "timeout" {
				cfg.Timeout = d
			} else {
				cfg.SessionTimeout = d
			}
		default:
			return nil, bad(fmt.Sprintf("unknown parameter %q (known: session_timeout, timeout)", key))
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, bad(strings.TrimPrefix(err.Error(), prefix+": "+lease.ErrInvalid.Error()+": "))
	}
	return Open(ctx, cfg)
}

// Open connects to the ensemble and checks, within ctx and Timeout, that
// a server answers (else an error wrapping lease.ErrUnavailable), that the
// chroot exists, and that its ACL lets this client create and delete
// nodes there (else an error wrapping lease.ErrInvalid, and zk.ErrNoAuth
// for a refusal).
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Backend{cfg: cfg, acl: zk.WorldACL(zk.PermAll), tenures: map[string]*tenure{}}
	if cfg.User != "" {
		b.acl = zk.DigestACL(zk.PermAll, cfg.User, cfg.Password)
	}
	ctx, cancel := leasekit.Bound(ctx, cfg.Timeout)
	defer cancel()
	shared, err := b.connect(ctx, cfg.SessionTimeout, false)
	if err != nil {
		return nil, err
	}
	b.shared = shared
	if err := b.check(ctx); err != nil {
		shared.close()
		return nil, err
	}
	return b, nil
}

// connect opens a session with the given timeout, waits within ctx until
// it is ready, and authenticates it. A session that does not come up is
// closed, and the error wraps lease.ErrUnavailable.
func (b *Backend) connect(ctx context.Context, timeout time.Duration, final bool) (*session, error) {
	s, err := dialSession(b.cfg.Servers, timeout, final, b.cfg.Logger)
	if err != nil {
		// The servers' names did not resolve.
		return nil, fmt.Errorf("%s: %w: servers %v: %v", prefix, lease.ErrInvalid, b.cfg.Servers, err)
	}
	if err := s.ready(ctx); err != nil {
		s.close()
		if dialErr := s.lastDialError(); dialErr != nil {
			err = fmt.Errorf("%w (last dial: %v)", err, dialErr)
		}
		return nil, leasekit.Unavailable(prefix, "connect", strings.Join(b.cfg.Servers, ","), err)
	}
	if b.cfg.User != "" {
		auth := []byte(b.cfg.User + ":" + b.cfg.Password)
		// AddAuth is remembered by the client and sent again on every
		// reconnection.
		if _, err := call(ctx, s, func(c *zk.Conn) (struct{}, error) { return struct{}{}, c.AddAuth("digest", auth) }); err != nil {
			s.close()
			return nil, leasekit.Unavailable(prefix, "authenticate", b.cfg.User, err)
		}
	}
	return s, nil
}

// check makes sure, on the shared session, that the chroot exists and
// that its ACL lets us create and delete the lease nodes: it creates and
// deletes an ephemeral probe node. A refusal now is one clear error at
// Open, instead of a failure at every Acquire.
func (b *Backend) check(ctx context.Context) error {
	exists, err := callIdempotent(ctx, b.shared, func(c *zk.Conn) (bool, error) {
		ok, _, err := c.Exists(b.cfg.Chroot)
		return ok, err
	})
	if err != nil {
		return leasekit.Unavailable(prefix, "open", b.cfg.Chroot, err)
	}
	if !exists {
		return fmt.Errorf("%s: %w: chroot %s does not exist (create it first, e.g. zkCli.sh create %s)", prefix, lease.ErrInvalid, b.cfg.Chroot, b.cfg.Chroot)
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	probe := b.nodePath("coord-probe-" + hex.EncodeToString(nonce[:]))
	_, err = call(ctx, b.shared, func(c *zk.Conn) (string, error) {
		return c.Create(probe, nil, zk.FlagEphemeral, b.acl)
	})
	if err == nil || errors.Is(err, zk.ErrNodeExists) {
		_, err = call(ctx, b.shared, func(c *zk.Conn) (struct{}, error) { return struct{}{}, c.Delete(probe, -1) })
		if errors.Is(err, zk.ErrNoNode) {
			err = nil
		}
	}
	return b.refusal("open", b.cfg.Chroot, err)
}

// refusal classifies an error of a request on the chroot or a lease node:
// nil stays nil; an ACL refusal or a vanished chroot wraps lease.ErrInvalid
// (retrying will not help); anything else is lease.ErrUnavailable.
func (b *Backend) refusal(op, name string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoAuth), errors.Is(err, zk.ErrInvalidACL), errors.Is(err, zk.ErrAuthFailed):
		who := "world:anyone"
		if b.cfg.User != "" {
			who = "digest user " + strconv.Quote(b.cfg.User)
		}
		return fmt.Errorf("%s: %s %q: %w: the ACL of chroot %s refuses %s: %w", prefix, op, name, lease.ErrInvalid, b.cfg.Chroot, who, err)
	case errors.Is(err, zk.ErrNoNode):
		return fmt.Errorf("%s: %s %q: %w: chroot %s does not exist: %w", prefix, op, name, lease.ErrInvalid, b.cfg.Chroot, err)
	}
	return leasekit.Unavailable(prefix, op, name, err)
}

// nodePath returns the path of the node of lease name.
func (b *Backend) nodePath(name string) string {
	if b.cfg.Chroot == "/" {
		return "/" + name
	}
	return b.cfg.Chroot + "/" + name
}

// checkLeaseName checks name for this Backend's chroot.
func (b *Backend) checkLeaseName(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if b.cfg.Chroot == "/" && name == "zookeeper" {
		return fmt.Errorf("%s: %w: lease name %q: reserved by ZooKeeper at the root", prefix, lease.ErrInvalid, name)
	}
	return nil
}

// read returns the record of name, read on the shared session.
func (b *Backend) read(ctx context.Context, name string) (lease.Record, *zk.Stat, error) {
	type node struct {
		data []byte
		stat *zk.Stat
	}
	n, err := callIdempotent(ctx, b.shared, func(c *zk.Conn) (node, error) {
		data, stat, err := c.Get(b.nodePath(name))
		return node{data, stat}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return lease.Record{Name: name}, nil, nil
	}
	if err != nil {
		return lease.Record{}, nil, b.refusal("get", name, err)
	}
	rec, err := decode(name, n.data, n.stat)
	if err != nil {
		return lease.Record{}, nil, fmt.Errorf("%s: get %q: %w", prefix, name, err)
	}
	return rec, n.stat, nil
}

// Acquire implements lease.Backend: in a session of its own whose timeout
// is ttl, it creates the lease's ephemeral node, which fails if the node
// exists. The token is the node's czxid.
func (b *Backend) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (lease.Record, error) {
	if err := b.checkArgs(name, holder, ttl, 1); err != nil {
		return lease.Record{}, err
	}
	if err := b.life.Check(prefix); err != nil {
		return lease.Record{}, err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	// A cheap read first: a held lease costs no session.
	if rec, _, err := b.read(ctx, name); err != nil || !rec.Free() {
		return rec, b.held("acquire", name, rec, err)
	}
	sess, err := b.session(ctx, ttl)
	if err != nil {
		return lease.Record{}, err
	}
	sent := time.Now()
	path, data := b.nodePath(name), []byte(holder)
	// Create and set in one transaction: the set's reply carries the
	// node's stat (its czxid, the token), which a plain create's does not.
	resp, err := call(ctx, sess, func(c *zk.Conn) ([]zk.MultiResponse, error) {
		return c.Multi(
			&zk.CreateRequest{Path: path, Data: data, Acl: b.acl, Flags: zk.FlagEphemeral},
			&zk.SetDataRequest{Path: path, Data: data, Version: 0})
	})
	if err != nil {
		// Closing the session deletes the node if the create did happen
		// after all (its reply lost): no lease is left behind.
		b.closeInBackground(sess)
		if errors.Is(err, zk.ErrNodeExists) {
			rec, _, err := b.read(ctx, name)
			return rec, b.held("acquire", name, rec, err)
		}
		return lease.Record{}, b.refusal("acquire", name, err)
	}
	stat := resp[1].Stat
	t := newTenure(name, holder, uint64(stat.Czxid), sess, stat.EphemeralOwner, stat.Czxid, b.closeInBackground)
	b.mu.Lock()
	closed := b.closed
	if !closed {
		b.tenures[name] = t
	}
	b.mu.Unlock()
	if closed {
		// Close began while we acquired: it did not see this tenure.
		sess.close()
		return lease.Record{}, fmt.Errorf("%s: %w", prefix, lease.ErrClosed)
	}
	if err := t.extend(sent); err != nil {
		// Only Close ends a tenure this young.
		return lease.Record{}, fmt.Errorf("%s: acquire %q: %w: %w", prefix, name, lease.ErrClosed, err)
	}
	return lease.Record{Name: name, Holder: holder, Token: t.token, Expiry: sent.Add(sess.granted())}, nil
}

// held returns the error of an Acquire that found rec, or err.
func (b *Backend) held(op, name string, rec lease.Record, err error) error {
	switch {
	case err != nil:
		return err
	case rec.Free():
		// Freed between the create and the read: the attempt did fail.
		return fmt.Errorf("%s: %s %q: %w (freed while acquiring; retry)", prefix, op, name, lease.ErrHeld)
	}
	return fmt.Errorf("%s: %s %q: %w (holder %q, token %d)", prefix, op, name, lease.ErrHeld, rec.Holder, rec.Token)
}

// session opens a tenure's session with timeout ttl. A server that grants
// less than ttl (its maxSessionTimeout) would let the session expire
// before the holder's deadline: that is an error wrapping
// lease.ErrInvalid, and the session is closed.
func (b *Backend) session(ctx context.Context, ttl time.Duration) (*session, error) {
	sess, err := b.connect(ctx, ttl, true)
	if err != nil {
		return nil, err
	}
	if g := sess.granted(); g < ttl {
		b.closeInBackground(sess)
		return nil, fmt.Errorf("%s: %w: ttl %v is longer than the session timeout the ensemble grants (%v: its maxSessionTimeout)", prefix, lease.ErrInvalid, ttl, g)
	}
	return sess, nil
}

// Renew implements lease.Backend: one read of the node on the tenure's
// session, which proves the session alive to the server (resetting its
// timeout) and checks that the node is still the tenure's.
func (b *Backend) Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (lease.Record, error) {
	if err := b.checkArgs(name, holder, ttl, token); err != nil {
		return lease.Record{}, err
	}
	if err := b.life.Check(prefix); err != nil {
		return lease.Record{}, err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	t := b.tenure(name, holder, token)
	if t == nil {
		return b.foreign(ctx, "renew", name, holder, token)
	}
	if err := t.lock(ctx); err != nil {
		return lease.Record{}, leasekit.Unavailable(prefix, "renew", name, err)
	}
	defer t.unlock()
	sess, _, _, ended := t.current()
	if ended != nil {
		return b.lost(ctx, "renew", name, token, ended)
	}
	if ttl > sess.granted() {
		return b.rebind(ctx, t, ttl)
	}
	sent := time.Now()
	if _, err := b.owned(ctx, t, "renew"); err != nil {
		return lease.Record{}, err
	}
	if err := t.extend(sent); err != nil {
		return b.lost(ctx, "renew", name, token, err)
	}
	return lease.Record{Name: name, Holder: holder, Token: token, Expiry: sent.Add(sess.granted())}, nil
}

// owned reads the tenure's node on its own session and returns its stat if
// it is still the tenure's. If not, or if the session expired, it ends the
// tenure and returns an error wrapping lease.ErrLost; if the session is
// suspended (no server answers), lease.ErrUnavailable.
func (b *Backend) owned(ctx context.Context, t *tenure, op string) (*zk.Stat, error) {
	sess, owner, czxid, ended := t.current()
	if ended != nil {
		_, err := b.lost(ctx, op, t.name, t.token, ended)
		return nil, err
	}
	stat, err := callIdempotent(ctx, sess, func(c *zk.Conn) (*zk.Stat, error) {
		ok, stat, err := c.Exists(b.nodePath(t.name))
		if err == nil && !ok {
			stat = nil
		}
		return stat, err
	})
	switch {
	case errors.Is(err, errExpired):
		t.end(errSessionExpired)
	case err != nil:
		return nil, leasekit.Unavailable(prefix, op, t.name, fmt.Errorf("session suspended: %w", err))
	case stat == nil || stat.EphemeralOwner != owner || stat.Czxid != czxid:
		t.end(errGone)
	default:
		return stat, nil
	}
	_, _, _, ended = t.current()
	_, err = b.lost(ctx, op, t.name, t.token, ended)
	return nil, err
}

// rebind moves the tenure's node to a new session whose timeout is ttl,
// for a Renew that asks for more than the session was granted: a
// session's timeout is fixed when it starts. One transaction on the new
// session deletes the node (if its version is unchanged) and creates it
// again, carrying the tenure's token in its data.
func (b *Backend) rebind(ctx context.Context, t *tenure, ttl time.Duration) (lease.Record, error) {
	stat, err := b.owned(ctx, t, "renew")
	if err != nil {
		return lease.Record{}, err
	}
	sess, err := b.session(ctx, ttl)
	if err != nil {
		return lease.Record{}, err
	}
	sent := time.Now()
	path, data := b.nodePath(t.name), encodeRebound(t.token, t.holder)
	resp, err := call(ctx, sess, func(c *zk.Conn) ([]zk.MultiResponse, error) {
		return c.Multi(
			&zk.DeleteRequest{Path: path, Version: stat.Version},
			&zk.CreateRequest{Path: path, Data: data, Acl: b.acl, Flags: zk.FlagEphemeral},
			&zk.SetDataRequest{Path: path, Data: data, Version: 0})
	})
	if err != nil {
		b.closeInBackground(sess)
		if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
			t.end(errGone)
			return b.lost(ctx, "renew", t.name, t.token, errGone)
		}
		return lease.Record{}, b.refusal("renew", t.name, err)
	}
	created := resp[2].Stat
	b.closeInBackground(t.rebound(sess, created.EphemeralOwner, created.Czxid))
	if err := t.extend(sent); err != nil {
		return b.lost(ctx, "renew", t.name, t.token, err)
	}
	return lease.Record{Name: t.name, Holder: t.holder, Token: t.token, Expiry: sent.Add(sess.granted())}, nil
}

// Release implements lease.Backend: it deletes the node on the tenure's
// session, if it is still the tenure's, then closes the session (which
// waits for the server's answer, a second at most).
func (b *Backend) Release(ctx context.Context, name, holder string, token uint64) error {
	if err := b.checkArgs(name, holder, time.Nanosecond, token); err != nil {
		return err
	}
	if err := b.life.Check(prefix); err != nil {
		return err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	t := b.tenure(name, holder, token)
	if t == nil {
		_, err := b.foreign(ctx, "release", name, holder, token)
		return err
	}
	if err := t.lock(ctx); err != nil {
		return leasekit.Unavailable(prefix, "release", name, err)
	}
	defer t.unlock()
	stat, err := b.owned(ctx, t, "release")
	if err != nil {
		return err
	}
	sess, _, _, ended := t.current()
	if ended != nil {
		_, err := b.lost(ctx, "release", name, token, ended)
		return err
	}
	// The version guards against a node deleted and created again since
	// the read; only this session's own requests could do that.
	_, err = call(ctx, sess, func(c *zk.Conn) (struct{}, error) {
		return struct{}{}, c.Delete(b.nodePath(name), stat.Version)
	})
	switch {
	case err == nil:
		// Closed before returning, so that a Release leaves no work
		// behind to compete with what the caller does next.
		if sess := t.finish(errReleased); sess != nil {
			sess.close()
		}
		b.forget(t)
		return nil
	case errors.Is(err, errExpired), errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrBadVersion):
		t.end(errGone)
		_, err := b.lost(ctx, "release", name, token, errGone)
		return err
	}
	return b.refusal("release", name, err)
}

// foreign answers a Renew or Release for a tenure this Backend did not
// acquire. A ZooKeeper lease lives in its holder's session, which no other
// client can renew or close: if name's current holder and token are
// these, that is an error wrapping lease.ErrInvalid; otherwise the token
// is not current, lease.ErrLost.
func (b *Backend) foreign(ctx context.Context, op, name, holder string, token uint64) (lease.Record, error) {
	rec, _, err := b.read(ctx, name)
	if err != nil {
		return lease.Record{}, err
	}
	if rec.Holder == holder && rec.Token == token {
		return rec, fmt.Errorf("%s: %s %q token %d: %w: acquired through another Backend; a ZooKeeper lease lives in its holder's session", prefix, op, name, token, lease.ErrInvalid)
	}
	return rec, fmt.Errorf("%s: %s %q token %d: %w (now holder %q, token %d)", prefix, op, name, token, lease.ErrLost, rec.Holder, rec.Token)
}

// Get implements lease.Backend. A held record's Expiry is zero: the
// holder's session expires on the server, at a time no other client can
// know (each renewal and each ping of the holder's client postpones it).
func (b *Backend) Get(ctx context.Context, name string) (lease.Record, error) {
	if err := b.checkLeaseName(name); err != nil {
		return lease.Record{}, err
	}
	if err := b.life.Check(prefix); err != nil {
		return lease.Record{}, err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	rec, _, err := b.read(ctx, name)
	return rec, err
}

// Ping makes one plain round trip to the ensemble (an exists of the
// chroot on the shared session), the reference beside which `coord bench
// latency` reports the lease operations.
func (b *Backend) Ping(ctx context.Context) error {
	if err := b.life.Check(prefix); err != nil {
		return err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	_, err := callIdempotent(ctx, b.shared, func(c *zk.Conn) (bool, error) {
		ok, _, err := c.Exists(b.cfg.Chroot)
		return ok, err
	})
	if err != nil {
		return leasekit.Unavailable(prefix, "ping", b.cfg.Chroot, err)
	}
	return nil
}

// Close implements lease.Backend: it ends every watch and closes every
// session. Unlike the other backends' Close, this frees the leases this
// Backend holds at once: the server deletes a closed session's ephemeral
// nodes, as it does when the session of a dead holder expires.
func (b *Backend) Close() error {
	if !b.life.Close() {
		return nil
	}
	b.mu.Lock()
	b.closed = true
	tenures := make([]*tenure, 0, len(b.tenures))
	for _, t := range b.tenures {
		tenures = append(tenures, t)
	}
	b.mu.Unlock()
	// Every session at once: each close waits up to a second for a
	// server that does not answer.
	var wg sync.WaitGroup
	for _, t := range tenures {
		wg.Go(func() { t.end(errClosed) })
	}
	wg.Go(b.shared.close)
	wg.Wait()
	b.closing.Wait()
	return nil
}

// closeInBackground closes a session without waiting for it; Close waits
// for those it started before. Once Close has begun, it closes s at once.
func (b *Backend) closeInBackground(s *session) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		s.close()
		return
	}
	b.closing.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.closing.Done()
		s.close()
	}()
}

// tenure returns this Backend's tenure of name for holder and token, or
// nil.
func (b *Backend) tenure(name, holder string, token uint64) *tenure {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.tenures[name]
	if t == nil || t.holder != holder || t.token != token {
		return nil
	}
	return t
}

// forget drops a released tenure: its node is gone, and no later node
// can have its token, so a Renew or Release of it reads ErrLost from the
// store. Tenures that ended otherwise stay until the name is acquired
// again here: their node may outlive them until the session expires.
func (b *Backend) forget(t *tenure) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tenures[t.name] == t {
		delete(b.tenures, t.name)
	}
}

// lost returns the current record with an error wrapping lease.ErrLost
// that says why the tenure ended.
func (b *Backend) lost(ctx context.Context, op, name string, token uint64, why error) (lease.Record, error) {
	rec, _, err := b.read(ctx, name)
	if err != nil {
		rec = lease.Record{Name: name} // the verdict stands; only the report is missing
	}
	return rec, fmt.Errorf("%s: %s %q token %d: %w: %w (now holder %q, token %d)", prefix, op, name, token, lease.ErrLost, why, rec.Holder, rec.Token)
}

// checkArgs checks the arguments of Acquire (token 1), Renew and Release.
func (b *Backend) checkArgs(name, holder string, ttl time.Duration, token uint64) error {
	if err := b.checkLeaseName(name); err != nil {
		return err
	}
	if err := leasekit.CheckToken(prefix, name, holder, token, ttl); err != nil {
		return err
	}
	if ttl > sessionTimeoutMax {
		return fmt.Errorf("%s: lease %q: %w: ttl %v is longer than a session can be", prefix, name, lease.ErrInvalid, ttl)
	}
	return checkHolder(holder)
}

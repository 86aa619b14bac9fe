package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"coord/internal/leasekit"
	"coord/lease"
)

const prefix = "lease/redis"

func init() {
	lease.Register("redis", openURL)
	lease.Register("rediss", openURL) // TLS
	// go-redis logs dial failures to stderr from its own global logger; the
	// backend reports them as errors, so they go to slog at debug level.
	goredis.SetLogger(debugLogger{})
}

// debugLogger sends go-redis's internal log lines to slog at debug level.
type debugLogger struct{}

func (debugLogger) Printf(ctx context.Context, format string, v ...any) {
	slog.DebugContext(ctx, "lease/redis: "+fmt.Sprintf(format, v...))
}

// Config configures a Backend. Start from DefaultConfig and set Options.
type Config struct {
	// Options are the go-redis client options: address, database,
	// credentials, timeouts. Open overrides two of them: MaxRetries (-1:
	// a command whose reply was lost is not sent again, since the caller
	// must learn that its outcome is unknown) and ContextTimeoutEnabled
	// (true: the caller's deadline bounds every command).
	Options *goredis.Options

	// Prefix is prepended to every key and channel name, so that several
	// applications can share a server.
	Prefix string

	// KeyspaceEvents lets the first Watch enable expired-key events on the
	// server (CONFIG SET notify-keyspace-events, adding "Ex").
	KeyspaceEvents bool

	// Timeout bounds an operation whose context has no deadline.
	Timeout time.Duration
}

// DefaultConfig returns a Config for a server on localhost:6379, database 0,
// with the prefix "coord:", keyspace events on, and a 5 s timeout.
func DefaultConfig() Config {
	return Config{
		Options:        &goredis.Options{Addr: "localhost:6379"},
		Prefix:         "coord:",
		KeyspaceEvents: true,
		Timeout:        leasekit.TimeoutDefault,
	}
}

// Validate reports every field that is wrong, wrapping lease.ErrInvalid.
func (c Config) Validate() error {
	var errs []error
	if c.Options == nil || c.Options.Addr == "" {
		errs = append(errs, errors.New("Options.Addr is empty"))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("Timeout %v is not positive", c.Timeout))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %w: %w", prefix, lease.ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// Backend is a lease.Backend on one Redis server. It is safe for
// concurrent use: commands share go-redis's connection pool, and each
// Watch has a pub/sub connection of its own.
type Backend struct {
	cfg    Config
	client *goredis.Client

	keyspaceOnce sync.Once

	life leasekit.Lifecycle // closed by Close, which ends every watch
}

var _ lease.Backend = (*Backend)(nil)

// openURL opens redis://host:port/db or rediss:// (TLS) with go-redis's
// URL options, plus prefix=..., keyspace=auto|off and, for rediss://, the
// files cacert=, cert= and key=.
func openURL(ctx context.Context, u *url.URL) (lease.Backend, error) {
	cfg := DefaultConfig()
	q := u.Query()
	files := leasekit.TakeTLSParams(q)
	if v, ok := q["prefix"]; ok {
		cfg.Prefix = v[len(v)-1]
		q.Del("prefix")
	}
	if v, ok := q["keyspace"]; ok {
		switch v[len(v)-1] {
		case "auto":
			cfg.KeyspaceEvents = true
		case "off":
			cfg.KeyspaceEvents = false
		default:
			return nil, fmt.Errorf("%s: %w: store URL %q: keyspace=%q: want auto or off", prefix, lease.ErrInvalid, u.Redacted(), v[len(v)-1])
		}
		q.Del("keyspace")
	}
	rest := *u
	rest.RawQuery = q.Encode()
	opts, err := goredis.ParseURL(rest.String())
	if err != nil {
		return nil, fmt.Errorf("%s: %w: store URL %q: %v", prefix, lease.ErrInvalid, u.Redacted(), err)
	}
	if !files.Empty() {
		if opts.TLSConfig == nil {
			return nil, fmt.Errorf("%s: %w: store URL %q: cacert, cert and key need rediss://, not redis://", prefix, lease.ErrInvalid, u.Redacted())
		}
		tlsConfig, err := files.Config(prefix, opts.TLSConfig.ServerName)
		if err != nil {
			return nil, err
		}
		tlsConfig.InsecureSkipVerify = opts.TLSConfig.InsecureSkipVerify // skip_verify, go-redis's
		opts.TLSConfig = tlsConfig
	}
	cfg.Options = opts
	return Open(ctx, cfg)
}

// Open returns a Backend for the server in cfg. It checks that the server
// answers (PING) within ctx, so that a wrong address fails here, with an
// error wrapping lease.ErrUnavailable.
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := *cfg.Options
	opts.MaxRetries = -1
	opts.ContextTimeoutEnabled = true
	opts.DisableIdentity = true // CLIENT SETINFO is Redis 7.2+; Debian 12 has 7.0
	b := &Backend{cfg: cfg, client: goredis.NewClient(&opts)}
	b.cfg.Options = &opts
	ctx, cancel := leasekit.Bound(ctx, cfg.Timeout)
	defer cancel()
	if err := b.client.Ping(ctx).Err(); err != nil {
		b.client.Close()
		return nil, leasekit.Unavailable(prefix, "open", opts.Addr, err)
	}
	return b, nil
}

func (b *Backend) leaseKey(name string) string   { return b.cfg.Prefix + "{" + name + "}:lease" }
func (b *Backend) counterKey(name string) string { return b.cfg.Prefix + "{" + name + "}:token" }
func (b *Backend) channel() string               { return b.cfg.Prefix + "changes" }

// reply is what every script returns.
type reply struct {
	won     bool
	value   string // "" when free
	pttl    int64  // milliseconds; -2 absent, -1 no expiry
	counter uint64
}

// record converts a reply to a Record, with Expiry measured from sent.
func (b *Backend) record(name string, r reply, sent time.Time) (lease.Record, error) {
	if r.value == "" {
		return lease.Record{Name: name, Token: r.counter}, nil
	}
	tokenText, holder, ok := strings.Cut(r.value, ":")
	token, err := strconv.ParseUint(tokenText, 10, 64)
	// One spelling per token, the one value writes: "012:x" is not
	// coord's, so it is not read as token 12.
	if !ok || err != nil || token == 0 || holder == "" || strconv.FormatUint(token, 10) != tokenText {
		return lease.Record{}, fmt.Errorf("%s: lease %q: %w: key %s holds %q, want TOKEN:HOLDER", prefix, name, lease.ErrCorrupt, b.leaseKey(name), r.value)
	}
	rec := lease.Record{Name: name, Holder: holder, Token: token}
	if r.pttl > 0 {
		rec.Expiry = sent.Add(time.Duration(r.pttl) * time.Millisecond)
	}
	return rec, nil
}

// run runs one script and decodes its reply.
func (b *Backend) run(ctx context.Context, op, name string, s *goredis.Script, args ...any) (reply, error) {
	if err := b.life.Check(prefix); err != nil {
		return reply{}, err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	res, err := s.Run(ctx, b.client, []string{b.leaseKey(name), b.counterKey(name)}, args...).Slice()
	if err != nil {
		return reply{}, b.fail(op, name, err)
	}
	return decode(res)
}

func decode(res []any) (reply, error) {
	var r reply
	if len(res) != 4 {
		return r, fmt.Errorf("%s: %w: script returned %d values, want 4", prefix, lease.ErrCorrupt, len(res))
	}
	won, ok1 := res[0].(int64)
	pttl, ok2 := res[2].(int64)
	if !ok1 || !ok2 {
		return r, fmt.Errorf("%s: %w: script returned %v", prefix, lease.ErrCorrupt, res)
	}
	r.won, r.pttl = won == 1, pttl
	if v, ok := res[1].(string); ok {
		r.value = v
	}
	if c, ok := res[3].(string); ok {
		n, err := strconv.ParseUint(c, 10, 64)
		if err != nil {
			return r, fmt.Errorf("%s: %w: token counter holds %q", prefix, lease.ErrCorrupt, c)
		}
		r.counter = n
	}
	return r, nil
}

// fail classifies a client error: a key of the wrong type is
// lease.ErrCorrupt; anything else (a network error, a done context, a
// server that is loading or read-only) leaves the outcome unknown and wraps
// lease.ErrUnavailable.
func (b *Backend) fail(op, name string, err error) error {
	var rerr goredis.Error
	if errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "WRONGTYPE") {
		return fmt.Errorf("%s: %s %q: %w: %w", prefix, op, name, lease.ErrCorrupt, err)
	}
	return leasekit.Unavailable(prefix, op, name, err)
}

// Acquire implements lease.Backend.
func (b *Backend) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (lease.Record, error) {
	if err := leasekit.CheckAcquire(prefix, name, holder, ttl); err != nil {
		return lease.Record{}, err
	}
	sent := time.Now()
	r, err := b.run(ctx, "acquire", name, acquireScript, holder, ttlMillis(ttl), b.channel(), name)
	if err != nil {
		return lease.Record{}, err
	}
	rec, err := b.record(name, r, sent)
	if err != nil || r.won {
		return rec, err
	}
	return rec, fmt.Errorf("%s: acquire %q: %w (holder %q, token %d)", prefix, name, lease.ErrHeld, rec.Holder, rec.Token)
}

// Renew implements lease.Backend.
func (b *Backend) Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (lease.Record, error) {
	if err := leasekit.CheckToken(prefix, name, holder, token, ttl); err != nil {
		return lease.Record{}, err
	}
	sent := time.Now()
	r, err := b.run(ctx, "renew", name, renewScript, value(token, holder), ttlMillis(ttl), b.channel(), name)
	if err != nil {
		return lease.Record{}, err
	}
	rec, err := b.record(name, r, sent)
	if err != nil || r.won {
		return rec, err
	}
	return rec, fmt.Errorf("%s: renew %q token %d: %w (now holder %q, token %d)", prefix, name, token, lease.ErrLost, rec.Holder, rec.Token)
}

// Release implements lease.Backend.
func (b *Backend) Release(ctx context.Context, name, holder string, token uint64) error {
	if err := leasekit.CheckToken(prefix, name, holder, token, time.Nanosecond); err != nil {
		return err
	}
	r, err := b.run(ctx, "release", name, releaseScript, value(token, holder), b.channel(), name)
	if err != nil {
		return err
	}
	if r.won {
		return nil
	}
	rec, err := b.record(name, r, time.Now())
	if err != nil {
		return err
	}
	return fmt.Errorf("%s: release %q token %d: %w (now holder %q, token %d)", prefix, name, token, lease.ErrLost, rec.Holder, rec.Token)
}

// Get implements lease.Backend.
func (b *Backend) Get(ctx context.Context, name string) (lease.Record, error) {
	if err := leasekit.CheckName(prefix, name); err != nil {
		return lease.Record{}, err
	}
	sent := time.Now()
	r, err := b.run(ctx, "get", name, getScript)
	if err != nil {
		return lease.Record{}, err
	}
	return b.record(name, r, sent)
}

// Ping makes one plain round trip to the server (a GET), the reference
// beside which `coord bench latency` reports the lease operations.
func (b *Backend) Ping(ctx context.Context) error {
	if err := b.life.Check(prefix); err != nil {
		return err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	if err := b.client.Get(ctx, b.cfg.Prefix+"ping").Err(); err != nil && !errors.Is(err, goredis.Nil) {
		return b.fail("ping", "", err)
	}
	return nil
}

// Close implements lease.Backend: it ends every watch and closes the
// connections.
func (b *Backend) Close() error {
	if !b.life.Close() {
		return nil
	}
	return b.client.Close()
}

// enableKeyspaceEvents adds "Ex" (expired-key events) to the server's
// notify-keyspace-events, once per Backend, if Config.KeyspaceEvents.
func (b *Backend) enableKeyspaceEvents(ctx context.Context) {
	if !b.cfg.KeyspaceEvents {
		return
	}
	b.keyspaceOnce.Do(func() {
		ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
		defer cancel()
		cur, err := b.client.ConfigGet(ctx, "notify-keyspace-events").Result()
		if err != nil {
			slog.Debug("lease/redis: cannot read notify-keyspace-events; watchers rely on their expiry timer", "err", err)
			return
		}
		flags := cur["notify-keyspace-events"]
		want := flags
		if !strings.Contains(want, "E") {
			want += "E"
		}
		if !strings.Contains(want, "x") && !strings.Contains(want, "A") {
			want += "x"
		}
		if want == flags {
			return
		}
		if err := b.client.ConfigSet(ctx, "notify-keyspace-events", want).Err(); err != nil {
			slog.Debug("lease/redis: cannot enable expired-key events; watchers rely on their expiry timer", "err", err)
			return
		}
		slog.Info("lease/redis: enabled expired-key events on the server", "notify-keyspace-events", want, "was", flags)
	})
}

func value(token uint64, holder string) string { return strconv.FormatUint(token, 10) + ":" + holder }

// ttlMillis rounds ttl up to whole milliseconds: the store must never keep
// a lease for less than the holder was told.
func ttlMillis(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}

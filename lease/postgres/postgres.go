package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"coord/internal/leasekit"
	"coord/lease"
)

const prefix = "lease/postgres"

func init() {
	lease.Register("postgres", openURL)
	lease.Register("postgresql", openURL)
}

// Config configures a Backend. Start from DefaultConfig and set Pool.
type Config struct {
	// Pool is the pgx pool configuration: server, credentials, TLS, pool
	// size. Watch connections use Pool.ConnConfig too.
	Pool *pgxpool.Config

	// Table is the lease table's name, a plain lower-case identifier; the
	// notification channel has the same name.
	Table string

	// Advisory makes holders take a session advisory lock, so that a
	// holder whose connection ends is replaced at once, and watchers wait
	// for that lock on a second connection, so that they learn of it at
	// once (see the package doc for the price).
	Advisory bool

	// Listen makes Watch push through LISTEN/NOTIFY; false polls every
	// PollInterval (for transaction poolers, which do not carry LISTEN).
	Listen bool

	// PollInterval is Watch's poll period when Listen is false.
	PollInterval time.Duration

	// Timeout bounds an operation whose context has no deadline.
	Timeout time.Duration
}

// DefaultConfig returns a Config with the table coord_lease, LISTEN on,
// advisory locks off, a 200 ms poll (if Listen is turned off), and a 5 s
// timeout. Pool must still be set.
func DefaultConfig() Config {
	return Config{Table: "coord_lease", Listen: true, PollInterval: 200 * time.Millisecond, Timeout: leasekit.TimeoutDefault}
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,50}$`)

// Validate reports every field that is wrong, wrapping lease.ErrInvalid.
func (c Config) Validate() error {
	var errs []error
	if c.Pool == nil {
		errs = append(errs, errors.New("Pool is nil"))
	}
	if !identifier.MatchString(c.Table) {
		errs = append(errs, fmt.Errorf("Table %q is not a lower-case identifier of at most 51 characters", c.Table))
	}
	if c.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("PollInterval %v is not positive", c.PollInterval))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("Timeout %v is not positive", c.Timeout))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %w: %w", prefix, lease.ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// Backend is a lease.Backend in a PostgreSQL table. It is safe for
// concurrent use: operations share a pgx pool; with Advisory, holders'
// operations go through one connection kept for the advisory locks; each
// Watch with Listen has a connection of its own, and with Advisory a second
// one once it has seen a live holder (see freeWait).
type Backend struct {
	cfg  Config
	pool *pgxpool.Pool
	sql  statements

	// liveConn is the advisory-lock connection (Advisory only); liveLocks
	// maps each name whose lock it holds to the token of the tenure the
	// lock protects (0 while acquiring); liveLost maps names to the tokens
	// whose lock was lost with a connection, for their next Renew to
	// report. liveMu guards all three and serializes the connection's use.
	liveMu    sync.Mutex
	liveConn  *pgx.Conn
	liveLocks map[string]uint64
	liveLost  map[string]uint64

	life leasekit.Lifecycle // closed by Close, which ends every watch
}

var _ lease.Backend = (*Backend)(nil)

// openURL opens postgres://... with pgx's URL parameters plus table,
// advisory, listen and poll.
func openURL(ctx context.Context, u *url.URL) (lease.Backend, error) {
	cfg := DefaultConfig()
	q := u.Query()
	bad := func(key string, err error) error {
		return fmt.Errorf("%s: %w: store URL %q: %s: %v", prefix, lease.ErrInvalid, u.Redacted(), key, err)
	}
	for _, key := range []string{"table", "advisory", "listen", "poll"} {
		vals, ok := q[key]
		if !ok {
			continue
		}
		v := vals[len(vals)-1]
		q.Del(key)
		var err error
		switch key {
		case "table":
			cfg.Table = v
		case "advisory":
			cfg.Advisory, err = strconv.ParseBool(v)
		case "listen":
			cfg.Listen, err = strconv.ParseBool(v)
		case "poll":
			cfg.PollInterval, err = time.ParseDuration(v)
		}
		if err != nil {
			return nil, bad(key, err)
		}
	}
	rest := *u
	rest.RawQuery = q.Encode()
	pool, err := pgxpool.ParseConfig(rest.String())
	if err != nil {
		return nil, fmt.Errorf("%s: %w: store URL %q: %v", prefix, lease.ErrInvalid, u.Redacted(), err)
	}
	cfg.Pool = pool
	return Open(ctx, cfg)
}

// Open connects to the server in cfg and creates the lease table and its
// trigger if they are missing. A server that cannot be reached within ctx
// is an error wrapping lease.ErrUnavailable.
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := leasekit.Bound(ctx, cfg.Timeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg.Pool)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", prefix, lease.ErrInvalid, err)
	}
	b := &Backend{cfg: cfg, pool: pool, sql: newStatements(cfg.Table), liveLocks: map[string]uint64{}, liveLost: map[string]uint64{}}
	if err := b.createSchema(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return b, nil
}

// createSchema creates the table, the notify function and the trigger if
// any is missing. Concurrent openers serialize on a transaction advisory
// lock: CREATE ... IF NOT EXISTS alone can still collide in the catalog.
func (b *Backend) createSchema(ctx context.Context) error {
	var ready bool
	err := b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = $1 AND tgrelid = to_regclass($2))`,
		b.cfg.Table+"_notify", b.cfg.Table).Scan(&ready)
	if err != nil {
		cc := b.cfg.Pool.ConnConfig
		return b.fail("open", fmt.Sprintf("%s:%d", cc.Host, cc.Port), err)
	}
	if ready {
		return nil
	}
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, 0)`, advisoryClass); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, b.sql.schema)
		return err
	})
	if err != nil {
		return b.fail("create table", b.cfg.Table, err)
	}
	return nil
}

// advisoryClass is the first key of every advisory lock coord takes
// (0xc00d), so that they do not collide with an application's own.
const advisoryClass = 0xc00d

// row is the result of every statement: whether it changed the lease, and
// the lease as the server sees it afterwards.
type row struct {
	won       bool
	holder    string
	token     int64
	live      bool  // unexpired and held
	remaining int64 // microseconds until expiry, on the server's clock
	expiry    int64 // the server's expiry, unix microseconds (a version for Watch)
	marked    bool  // the row records an advisory lock for its holder (column live)
}

// record converts a row to a Record, with Expiry measured from sent.
func (r row) record(name string, sent time.Time) lease.Record {
	if !r.live {
		return lease.Record{Name: name, Token: uint64(r.token)}
	}
	return lease.Record{Name: name, Holder: r.holder, Token: uint64(r.token), Expiry: sent.Add(time.Duration(r.remaining) * time.Microsecond)}
}

// querier is what the statements need of a pool or a connection.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (b *Backend) query(ctx context.Context, q querier, sql string, args ...any) (row, error) {
	var r row
	var holder *string
	var token, remaining, expiry *int64
	err := q.QueryRow(ctx, sql, args...).Scan(&r.won, &holder, &token, &r.live, &remaining, &expiry, &r.marked)
	if errors.Is(err, pgx.ErrNoRows) {
		return row{}, nil // a name never acquired
	}
	if err != nil {
		return row{}, err
	}
	if holder != nil {
		r.holder = *holder
	}
	if token != nil {
		r.token = *token
	}
	if remaining != nil {
		r.remaining = *remaining
	}
	if expiry != nil {
		r.expiry = *expiry
	}
	if r.token < 0 {
		return row{}, fmt.Errorf("%s: %w: negative token %d", prefix, lease.ErrCorrupt, r.token)
	}
	return r, nil
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
	var r row
	var err error
	if b.cfg.Advisory {
		r, err = b.acquireLive(ctx, name, holder, ttl)
	} else {
		r, err = b.query(ctx, b.pool, b.sql.acquire, name, holder, micros(ttl), false, false, false)
	}
	if err != nil {
		return lease.Record{}, b.fail("acquire", name, err)
	}
	rec := r.record(name, sent)
	if r.won {
		rec.Expiry = sent.Add(ttl) // granted as asked; remaining is a little less
		return rec, nil
	}
	if rec.Free() {
		// The statement lost to a contender whose row its snapshot
		// predates; read the winner's.
		if cur, err := b.Get(ctx, name); err == nil {
			rec = cur
		}
	}
	return rec, fmt.Errorf("%s: acquire %q: %w (holder %q, token %d)", prefix, name, lease.ErrHeld, rec.Holder, rec.Token)
}

// acquireLive is Acquire with an advisory lock, on the live connection.
func (b *Backend) acquireLive(ctx context.Context, name, holder string, ttl time.Duration) (row, error) {
	b.liveMu.Lock()
	defer b.liveMu.Unlock()
	conn, err := b.live(ctx)
	if err != nil {
		return row{}, err
	}
	// Taking the lock proves that no live session holds it, so that a
	// holder marked live has gone. A lock this session already holds
	// proves nothing: the live holder, if any, is this session.
	_, had := b.liveLocks[name]
	took := false
	if !had {
		if took, err = tryLock(ctx, conn, name, tryLockPause); err != nil {
			b.dropLive()
			return row{}, err
		}
		if took {
			b.liveLocks[name] = 0
		}
	}
	// The row is marked live only if this session holds the lock: a
	// tenure won while a stale session still holds it (its holder paused
	// past the TTL) is protected by its TTL alone.
	r, err := b.query(ctx, conn, b.sql.acquire, name, holder, micros(ttl), had || took, took, had)
	if err != nil {
		b.dropLive()
		return row{}, err
	}
	switch {
	case r.won && (had || took):
		b.liveLocks[name] = uint64(r.token)
	case took:
		b.unlock(ctx, name)
	}
	return r, nil
}

// tryLock takes name's advisory lock for conn's session, if no session
// holds it. Watchers take it shared for an instant each time it comes free
// (see freeWait), and a lock request, even a shared one, makes a try for
// the exclusive lock fail while it is granted or queued. So when the try
// fails, the same statement tries the lock shared, which succeeds only if
// no session holds it exclusively, and then the try is repeated after
// pause(attempt), until pause reports false. Without this, a holder that
// acquired just as its predecessor died could find the lock taken by the
// watchers that saw the death, and its tenure would not be marked live.
func tryLock(ctx context.Context, conn *pgx.Conn, name string, pause func(ctx context.Context, attempt int) bool) (bool, error) {
	for attempt := 0; ; attempt++ {
		var took, sharedOnly bool
		err := conn.QueryRow(ctx, `SELECT took, CASE WHEN took THEN false ELSE pg_try_advisory_xact_lock_shared($1, hashtext($2)) END
			FROM (SELECT pg_try_advisory_lock($1, hashtext($2)) AS took OFFSET 0) t`, advisoryClass, name).Scan(&took, &sharedOnly)
		if err != nil || took || !sharedOnly || !pause(ctx, attempt) {
			return took, err
		}
	}
}

// tryLockPause is tryLock's pause in Acquire: 1, 2, 4, 8 and 16 ms, 31 ms
// in all, and then no more tries. A watcher holds the lock for
// microseconds; a lock still held after that is left to the TTL.
func tryLockPause(ctx context.Context, attempt int) bool {
	return attempt < 5 && sleep(ctx, time.Millisecond<<attempt, nil)
}

// live returns the advisory-lock connection, connecting it if needed.
// Called with liveMu held.
func (b *Backend) live(ctx context.Context) (*pgx.Conn, error) {
	if b.liveConn != nil && !b.liveConn.IsClosed() {
		return b.liveConn, nil
	}
	b.dropLive()
	conn, err := pgx.ConnectConfig(ctx, b.cfg.Pool.ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	b.liveConn = conn
	return conn, nil
}

// dropLive closes the advisory-lock connection, which releases every lock
// it held: the leases they protected may be taken over from now on, and
// their next Renew says so. Called with liveMu held.
func (b *Backend) dropLive() {
	if b.liveConn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = b.liveConn.Close(ctx)
		cancel()
	}
	b.liveConn = nil
	for name, token := range b.liveLocks {
		if token != 0 {
			b.liveLost[name] = token
		}
	}
	clear(b.liveLocks)
}

// unlock releases this session's advisory lock on name. Called with liveMu
// held.
func (b *Backend) unlock(ctx context.Context, name string) {
	delete(b.liveLocks, name)
	if _, err := b.liveConn.Exec(ctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, advisoryClass, name); err != nil {
		b.dropLive()
	}
}

// Renew implements lease.Backend. With Advisory, a holder whose advisory
// lock is gone (its connection ended) has lost the lease, whatever the row
// says: a contender may already have taken it over.
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
	if b.cfg.Advisory {
		return b.renewLive(ctx, name, holder, token, ttl, sent)
	}
	return b.renew(ctx, b.pool, name, holder, token, ttl, sent)
}

func (b *Backend) renewLive(ctx context.Context, name, holder string, token uint64, ttl time.Duration, sent time.Time) (lease.Record, error) {
	b.liveMu.Lock()
	defer b.liveMu.Unlock()
	if b.liveLost[name] == token {
		delete(b.liveLost, name)
		return lease.Record{}, fmt.Errorf("%s: renew %q token %d: %w (the connection holding its advisory lock ended)", prefix, name, token, lease.ErrLost)
	}
	if b.liveLocks[name] != token || b.liveConn == nil {
		// Not a tenure this session's lock protects (won while a stale
		// session held the lock, or by another Backend): TTL alone.
		return b.renew(ctx, b.pool, name, holder, token, ttl, sent)
	}
	rec, err := b.renew(ctx, b.liveConn, name, holder, token, ttl, sent)
	switch {
	case errors.Is(err, lease.ErrLost) && (rec.Free() || rec.Token != token):
		b.unlock(ctx, name) // the tenure the lock protected is over
	case errors.Is(err, lease.ErrLost):
		// A wrong holder for the current token: the tenure goes on.
	case err != nil:
		b.dropLive()
		delete(b.liveLost, name)
		return lease.Record{}, fmt.Errorf("%s: renew %q token %d: %w (the connection holding its advisory lock failed: %v)", prefix, name, token, lease.ErrLost, err)
	}
	return rec, err
}

// renew runs the renew statement through q.
func (b *Backend) renew(ctx context.Context, q querier, name, holder string, token uint64, ttl time.Duration, sent time.Time) (lease.Record, error) {
	r, err := b.query(ctx, q, b.sql.renew, name, holder, int64(token), micros(ttl))
	if err != nil {
		return lease.Record{}, b.fail("renew", name, err)
	}
	rec := r.record(name, sent)
	if r.won {
		rec.Expiry = sent.Add(ttl)
		return rec, nil
	}
	return rec, fmt.Errorf("%s: renew %q token %d: %w (now holder %q, token %d)", prefix, name, token, lease.ErrLost, rec.Holder, rec.Token)
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
	r, err := b.query(ctx, b.pool, b.sql.release, name, holder, int64(token))
	if err != nil {
		return b.fail("release", name, err)
	}
	if over := r.won || !r.live || uint64(r.token) != token; b.cfg.Advisory && over {
		// Only once the tenure the lock protects is over: a Release by a
		// wrong holder changes nothing.
		b.liveMu.Lock()
		if b.liveLocks[name] == token {
			b.unlock(ctx, name)
		}
		if b.liveLost[name] == token {
			delete(b.liveLost, name)
		}
		b.liveMu.Unlock()
	}
	if r.won {
		return nil
	}
	rec := r.record(name, time.Now())
	return fmt.Errorf("%s: release %q token %d: %w (now holder %q, token %d)", prefix, name, token, lease.ErrLost, rec.Holder, rec.Token)
}

// Get implements lease.Backend.
func (b *Backend) Get(ctx context.Context, name string) (lease.Record, error) {
	if err := leasekit.CheckName(prefix, name); err != nil {
		return lease.Record{}, err
	}
	rec, _, err := b.get(ctx, b.pool, name)
	return rec, err
}

// reading is what read returns: the record, the server's expiry as a
// version, and whether the row marks its holder live (holding an advisory
// lock); live is false when the record is free.
type reading struct {
	rec     lease.Record
	version int64
	live    bool
}

// get reads name's record through q, and the server's expiry as a version.
func (b *Backend) get(ctx context.Context, q querier, name string) (lease.Record, int64, error) {
	r, err := b.read(ctx, q, name)
	return r.rec, r.version, err
}

// read reads name's record through q.
func (b *Backend) read(ctx context.Context, q querier, name string) (reading, error) {
	if err := b.life.Check(prefix); err != nil {
		return reading{}, err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	sent := time.Now()
	r, err := b.query(ctx, q, b.sql.get, name)
	if err != nil {
		return reading{}, b.fail("get", name, err)
	}
	rec := r.record(name, sent)
	if rec.Free() {
		return reading{rec: rec}, nil
	}
	return reading{rec: rec, version: r.expiry, live: r.marked}, nil
}

// Ping makes one plain round trip to the server (SELECT 1), the reference
// beside which `coord bench latency` reports the lease operations.
func (b *Backend) Ping(ctx context.Context) error {
	if err := b.life.Check(prefix); err != nil {
		return err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	var one int
	if err := b.pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		return b.fail("ping", "", err)
	}
	return nil
}

// Close implements lease.Backend: it ends every watch and closes every
// connection, the advisory-lock one included (so, with Advisory, the
// leases this Backend held may be taken over at once).
func (b *Backend) Close() error {
	if !b.life.Close() {
		return nil
	}
	b.liveMu.Lock()
	b.dropLive()
	b.liveMu.Unlock()
	// A connection whose query timed out is closed with a cancel request,
	// which pgx bounds at 15 s; across a partition the pool would wait for
	// all of it. Wait a little, then let the pool finish on its own.
	poolClosed := make(chan struct{})
	go func() { b.pool.Close(); close(poolClosed) }()
	select {
	case <-poolClosed:
	case <-time.After(closeWait):
	}
	return nil
}

// closeWait bounds how long Close waits for the pool's connections to close.
const closeWait = time.Second

// fail wraps a database error: the outcome of the operation is unknown,
// lease.ErrUnavailable. (A decoding failure is already lease.ErrCorrupt.)
func (b *Backend) fail(op, name string, err error) error {
	if errors.Is(err, lease.ErrCorrupt) {
		return fmt.Errorf("%s: %s %q: %w", prefix, op, name, err)
	}
	return leasekit.Unavailable(prefix, op, name, err)
}

// micros converts ttl to whole microseconds, rounding up: the server must
// never keep a lease for less than the holder was told.
func micros(ttl time.Duration) int64 { return int64((ttl + time.Microsecond - 1) / time.Microsecond) }

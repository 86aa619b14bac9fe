package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	sqlitedriver "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"coord/internal/leasekit"
	"coord/lease"
)

const prefix = "lease/sqlite"

func init() { lease.Register("sqlite", openURL) }

// Config configures a Backend. Start from DefaultConfig and set Path.
type Config struct {
	// Path is the database file. It is created if missing; its directory
	// must exist.
	Path string

	// BusyTimeout is how long an operation waits for another process's
	// write lock before it gives up with lease.ErrUnavailable (sooner if
	// its context is done). Lease transactions hold the lock for
	// microseconds; a long wait means something is wrong.
	BusyTimeout time.Duration

	// PollInterval is how often Watch reads the record (plus up to 20 %
	// jitter), besides waking at the expiry it read.
	PollInterval time.Duration
}

// DefaultConfig returns a Config with the defaults: a 5 s busy timeout and
// a 50 ms watch poll.
func DefaultConfig() Config {
	return Config{BusyTimeout: 5 * time.Second, PollInterval: 50 * time.Millisecond}
}

// Validate reports every field that is wrong, wrapping lease.ErrInvalid.
func (c Config) Validate() error {
	var errs []error
	if c.Path == "" {
		errs = append(errs, errors.New("Path is empty"))
	} else if strings.ContainsAny(c.Path, "?#") {
		errs = append(errs, fmt.Errorf("Path %q contains '?' or '#'", c.Path))
	}
	if c.BusyTimeout <= 0 {
		errs = append(errs, fmt.Errorf("BusyTimeout %v is not positive", c.BusyTimeout))
	}
	if c.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("PollInterval %v is not positive", c.PollInterval))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %w: %w", prefix, lease.ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// Backend is a lease.Backend in an SQLite file. It is safe for concurrent
// use; each operation runs on a connection of its own from a small pool.
type Backend struct {
	cfg  Config
	db   *sql.DB
	boot string

	life leasekit.Lifecycle // closed by Close, which ends every watch
}

var _ lease.Backend = (*Backend)(nil)

// openURL opens sqlite:///abs/path.db[?busy_timeout=5s&poll=50ms].
func openURL(ctx context.Context, u *url.URL) (lease.Backend, error) {
	cfg := DefaultConfig()
	if u.Host != "" || u.Opaque != "" || !filepath.IsAbs(u.Path) {
		return nil, fmt.Errorf("%s: %w: store URL %q: want sqlite:///absolute/path.db", prefix, lease.ErrInvalid, u.Redacted())
	}
	cfg.Path = u.Path
	for key, vals := range u.Query() {
		d, err := time.ParseDuration(vals[len(vals)-1])
		switch {
		case key != "busy_timeout" && key != "poll":
			return nil, fmt.Errorf("%s: %w: store URL %q: unknown parameter %q (known: busy_timeout, poll)", prefix, lease.ErrInvalid, u.Redacted(), key)
		case err != nil:
			return nil, fmt.Errorf("%s: %w: store URL %q: %s: %v", prefix, lease.ErrInvalid, u.Redacted(), key, err)
		case key == "busy_timeout":
			cfg.BusyTimeout = d
		default:
			cfg.PollInterval = d
		}
	}
	return Open(ctx, cfg)
}

// Open opens (creating if needed) the database at cfg.Path and its lease
// table.
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	boot, err := bootID()
	if err != nil {
		return nil, err
	}
	// The directory is not created here: a mistyped path would otherwise
	// make a new, empty store that nobody else uses, and a lease in it
	// would exclude no one. Say what to do instead.
	dir := filepath.Dir(cfg.Path)
	if info, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w: directory %s does not exist: create it first (mkdir -p %s), or choose a path in an existing one", prefix, lease.ErrInvalid, dir, dir)
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w: directory %s: %v", prefix, lease.ErrInvalid, dir, errors.Unwrap(err))
	} else if !info.IsDir() {
		return nil, fmt.Errorf("%s: %w: %s is not a directory", prefix, lease.ErrInvalid, dir)
	}
	// busy_timeout comes first so that switching to WAL waits for a
	// concurrent opener instead of failing. _txlock=immediate makes every
	// BeginTx a BEGIN IMMEDIATE: the write lock is taken before the read,
	// so no transaction decides on a state another one is about to change.
	dsn := fmt.Sprintf("%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate",
		cfg.Path, cfg.BusyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: open %s: %w", prefix, cfg.Path, err)
	}
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	b := &Backend{cfg: cfg, db: db, boot: boot}
	ctx, cancel := leasekit.Bound(ctx, cfg.BusyTimeout)
	defer cancel()
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		var se *sqlitedriver.Error
		if errors.As(err, &se) {
			switch se.Code() & 0xff {
			case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH:
				// The caller's mistake (a path it may not write), not an outage.
				return nil, fmt.Errorf("%s: %w: open %s: %v", prefix, lease.ErrInvalid, cfg.Path, err)
			}
		}
		return nil, b.fail("open", cfg.Path, err)
	}
	return b, nil
}

const schema = `CREATE TABLE IF NOT EXISTS coord_lease (
	name   TEXT PRIMARY KEY,
	holder TEXT NOT NULL,
	token  INTEGER NOT NULL,
	expiry INTEGER NOT NULL,
	boot   TEXT NOT NULL
) STRICT, WITHOUT ROWID`

// row is a lease as the table holds it.
type row struct {
	holder string
	token  uint64
	expiry int64 // machineNow nanoseconds
	boot   string
}

// live reports whether the row holds an unexpired lease at machine time now.
func (b *Backend) live(r row, now int64) bool {
	return r.holder != "" && r.boot == b.boot && r.expiry > now
}

// record converts a row read at machine time now (and wall time wallNow)
// to a Record whose Expiry is on the caller's clock.
func (b *Backend) record(name string, r row, now int64, wallNow time.Time) lease.Record {
	if !b.live(r, now) {
		return lease.Record{Name: name, Token: r.token}
	}
	return lease.Record{Name: name, Holder: r.holder, Token: r.token, Expiry: wallNow.Add(time.Duration(r.expiry - now))}
}

// Acquire implements lease.Backend.
func (b *Backend) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (rec lease.Record, err error) {
	if err := leasekit.CheckAcquire(prefix, name, holder, ttl); err != nil {
		return lease.Record{}, err
	}
	sent := time.Now()
	err = b.tx(ctx, "acquire", name, func(tx *sql.Tx) error {
		cur, now, err := b.read(ctx, tx, name)
		if err != nil {
			return err
		}
		if b.live(cur, now) {
			rec = b.record(name, cur, now, time.Now())
			return fmt.Errorf("%s: acquire %q: %w (holder %q, token %d)", prefix, name, lease.ErrHeld, cur.holder, cur.token)
		}
		token, err := nextToken(name, cur.token)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO coord_lease (name, holder, token, expiry, boot) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, token = excluded.token, expiry = excluded.expiry, boot = excluded.boot`,
			name, holder, int64(token), now+int64(ttl), b.boot)
		rec = lease.Record{Name: name, Holder: holder, Token: token, Expiry: sent.Add(ttl)}
		return err
	})
	return rec, err
}

// nextToken returns the token after last: one above it, and at least the
// wall clock in microseconds. The floor keeps tokens growing when the
// database file is deleted (or replaced by an empty one, or lost with a
// tmpfs at reboot): the row that held the last token is gone, the clock
// is not. It assumes the wall clock is not set back, across the loss, to
// before the last token was issued; tokens issued one after another run
// ahead of the clock only if acquisitions come faster than one a
// microsecond, which a committed SQLite transaction never does.
func nextToken(name string, last uint64) (uint64, error) {
	if last >= math.MaxInt64 { // the column is a signed 64-bit integer
		return 0, fmt.Errorf("%s: acquire %q: %w: last token %d leaves no room to grow", prefix, name, lease.ErrCorrupt, last)
	}
	return max(last+1, uint64(time.Now().UnixMicro())), nil
}

// Renew implements lease.Backend.
func (b *Backend) Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (rec lease.Record, err error) {
	if err := leasekit.CheckToken(prefix, name, holder, token, ttl); err != nil {
		return lease.Record{}, err
	}
	sent := time.Now()
	err = b.tx(ctx, "renew", name, func(tx *sql.Tx) error {
		cur, now, err := b.read(ctx, tx, name)
		if err != nil {
			return err
		}
		if !b.live(cur, now) || cur.holder != holder || cur.token != token {
			rec = b.record(name, cur, now, time.Now())
			return fmt.Errorf("%s: renew %q token %d: %w (now holder %q, token %d)", prefix, name, token, lease.ErrLost, rec.Holder, rec.Token)
		}
		_, err = tx.ExecContext(ctx, `UPDATE coord_lease SET expiry = ? WHERE name = ?`, now+int64(ttl), name)
		rec = lease.Record{Name: name, Holder: holder, Token: token, Expiry: sent.Add(ttl)}
		return err
	})
	return rec, err
}

// Release implements lease.Backend.
func (b *Backend) Release(ctx context.Context, name, holder string, token uint64) error {
	if err := leasekit.CheckToken(prefix, name, holder, token, time.Nanosecond); err != nil {
		return err
	}
	return b.tx(ctx, "release", name, func(tx *sql.Tx) error {
		cur, now, err := b.read(ctx, tx, name)
		if err != nil {
			return err
		}
		if !b.live(cur, now) || cur.holder != holder || cur.token != token {
			rec := b.record(name, cur, now, time.Now())
			return fmt.Errorf("%s: release %q token %d: %w (now holder %q, token %d)", prefix, name, token, lease.ErrLost, rec.Holder, rec.Token)
		}
		_, err = tx.ExecContext(ctx, `UPDATE coord_lease SET holder = '', expiry = 0 WHERE name = ?`, name)
		return err
	})
}

// Get implements lease.Backend.
func (b *Backend) Get(ctx context.Context, name string) (lease.Record, error) {
	if err := leasekit.CheckName(prefix, name); err != nil {
		return lease.Record{}, err
	}
	rec, _, err := b.get(ctx, name)
	return rec, err
}

// get reads the record without a write transaction (WAL readers never wait
// for the writer) and also returns the store's expiry, for Watch.
func (b *Backend) get(ctx context.Context, name string) (lease.Record, int64, error) {
	if err := b.life.Check(prefix); err != nil {
		return lease.Record{}, 0, err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.BusyTimeout)
	defer cancel()
	cur, now, err := b.read(ctx, b.db, name)
	if err != nil {
		return lease.Record{}, 0, b.fail("get", name, err)
	}
	rec := b.record(name, cur, now, time.Now())
	if rec.Free() {
		return rec, 0, nil
	}
	return rec, cur.expiry, nil
}

// Ping makes one plain round trip to the database (SELECT 1), the reference
// beside which `coord bench latency` reports the lease operations.
func (b *Backend) Ping(ctx context.Context) error {
	if err := b.life.Check(prefix); err != nil {
		return err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.BusyTimeout)
	defer cancel()
	var one int
	if err := b.db.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return b.fail("ping", "", err)
	}
	return nil
}

// Close implements lease.Backend: it ends every watch and closes the
// database.
func (b *Backend) Close() error {
	if !b.life.Close() {
		return nil
	}
	return b.db.Close()
}

// querier is what read needs of a *sql.DB or a *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// read returns name's row (a zero row if there is none) and the machine
// time at which it was read.
func (b *Backend) read(ctx context.Context, q querier, name string) (row, int64, error) {
	var r row
	var token int64
	err := q.QueryRowContext(ctx, `SELECT holder, token, expiry, boot FROM coord_lease WHERE name = ?`, name).
		Scan(&r.holder, &token, &r.expiry, &r.boot)
	now := machineNow()
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, now, nil
	}
	if err != nil {
		return row{}, now, err
	}
	if token < 0 {
		return row{}, now, fmt.Errorf("%s: lease %q: %w: negative token %d", prefix, name, lease.ErrCorrupt, token)
	}
	r.token = uint64(token)
	return r, now, nil
}

// tx runs fn in one BEGIN IMMEDIATE transaction and commits it if fn
// returns nil. An error of fn that wraps ErrHeld or ErrLost rolls back and
// is returned as is; any other failure wraps lease.ErrUnavailable.
func (b *Backend) tx(ctx context.Context, op, name string, fn func(*sql.Tx) error) error {
	if err := b.life.Check(prefix); err != nil {
		return err
	}
	ctx, cancel := leasekit.Bound(ctx, b.cfg.BusyTimeout)
	defer cancel()
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return b.fail(op, name, err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		if errors.Is(err, lease.ErrHeld) || errors.Is(err, lease.ErrLost) || errors.Is(err, lease.ErrCorrupt) {
			return err
		}
		return b.fail(op, name, err)
	}
	if err := tx.Commit(); err != nil {
		return b.fail(op, name, err)
	}
	return nil
}

// fail classifies a database error: a corrupt file is lease.ErrCorrupt;
// everything else (busy, I/O, a done context) means the outcome is unknown,
// lease.ErrUnavailable.
func (b *Backend) fail(op, name string, err error) error {
	var se *sqlitedriver.Error
	if errors.As(err, &se) && (se.Code()&0xff == sqlite3.SQLITE_CORRUPT || se.Code()&0xff == sqlite3.SQLITE_NOTADB) {
		return fmt.Errorf("%s: %s %q: %w: %w", prefix, op, name, lease.ErrCorrupt, err)
	}
	return leasekit.Unavailable(prefix, op, name, err)
}

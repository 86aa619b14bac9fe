package postgres

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"coord/internal/leasekit/leasekittest"
	"coord/lease"
)

// The watch modes a freeWait runs in: LISTEN, and polling once a minute, in
// which nothing but the freeWait can wake the watch before the test ends.
var freeWaitModes = []string{"advisory=true", "advisory=true&listen=false&poll=1m"}

// waitFor receives from ch until want holds, failing the test if ch closes
// or 20 s pass first (far less than the leases' TTL, a minute).
func waitFor(t *testing.T, ch <-chan lease.Record, what string, want func(lease.Record) bool) lease.Record {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case rec, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed while waiting for %s", what)
			}
			if want(rec) {
				return rec
			}
		case <-timeout:
			t.Fatalf("no %s within 20 s (TTL 1m)", what)
		}
	}
}

func isFree(rec lease.Record) bool { return rec.Free() }

// openAdvisory opens a Backend with the test server's URL and params, as a
// *Backend, closed when the test ends.
func openAdvisory(t *testing.T, params string) *Backend {
	t.Helper()
	return leasekittest.Open(t, withParams(t, params)).(*Backend)
}

// sqlConn connects to the test server directly, for the tests' own queries.
func sqlConn(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), withParams(t, ""))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { closeConn(conn) })
	return conn
}

// watchedHolder is a holder "a" of a lease name on a Backend of its own,
// and a watch of it from another, already waiting for the holder's lock.
type watchedHolder struct {
	name            string
	holder, watcher *Backend
	held            lease.Record
	ch              <-chan lease.Record
	sql             *pgx.Conn // a connection of the test's own
}

// watchHolder acquires a fresh lease for a minute with advisory=true, watches
// it until ctx ends from a Backend opened with watchParams, and waits until
// the watch waits on the holder's lock.
func watchHolder(t *testing.T, ctx context.Context, watchParams string) watchedHolder {
	t.Helper()
	w := watchedHolder{name: leasekittest.Name(t), holder: openAdvisory(t, "advisory=true"), watcher: openAdvisory(t, watchParams), sql: sqlConn(t)}
	var err error
	w.held, err = w.holder.Acquire(context.Background(), w.name, "a", time.Minute)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	w.ch, err = w.watcher.Watch(ctx, w.name)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	waitFor(t, w.ch, "the holder's record", func(r lease.Record) bool { return r.Holder == "a" })
	eventually(t, "the watcher's wait for the lock", func() bool { return lockRequests(t, w.sql, w.name, "ShareLock", false) == 1 })
	return w
}

// lockRequests counts the sessions that hold (granted) or wait for name's
// advisory lock in the given mode.
func lockRequests(t *testing.T, conn *pgx.Conn, name, mode string, granted bool) int {
	t.Helper()
	var n int
	err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		AND classid = $1 AND objid = hashtext($2)::oid AND objsubid = 2 AND mode = $3 AND granted = $4`,
		advisoryClass, name, mode, granted).Scan(&n)
	if err != nil {
		t.Fatalf("pg_locks: %v", err)
	}
	return n
}

// eventually retries check every 10 ms until it holds, failing the test
// after 20 s: the server ends sessions and withdraws requests on its own
// time.
func eventually(t *testing.T, what string, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !check() {
		if !time.Now().Before(deadline) {
			t.Fatalf("not within 20 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond) // a retry period, not a wait for a state
	}
}

// A watcher learns that an advisory holder's session ended (its Backend
// closed without Release, or its connection terminated by the server) long
// before the TTL: with LISTEN, and polling once a minute. (With LISTEN the
// 5 s health read would also see it within the test's 20 s; polling, only
// the freeWait can.)
func TestWatchSeesDeadAdvisoryHolder(t *testing.T) {
	for _, mode := range freeWaitModes {
		for _, death := range []string{"close", "terminate"} {
			t.Run(mode+"/"+death, func(t *testing.T) {
				w := watchHolder(t, context.Background(), mode)
				switch death {
				case "close":
					if err := w.holder.Close(); err != nil {
						t.Fatalf("Close: %v", err)
					}
				case "terminate":
					w.holder.liveMu.Lock()
					pid := w.holder.liveConn.PgConn().PID()
					w.holder.liveMu.Unlock()
					_, err := w.sql.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid)
					if err != nil {
						t.Fatalf("pg_terminate_backend: %v", err)
					}
				}
				got := waitFor(t, w.ch, "a free record after the holder's session ended", isFree)
				if got.Token != w.held.Token {
					t.Fatalf("the free record's token: got %v, want %v", got.Token, w.held.Token)
				}
			})
		}
	}
}

// Release wakes a polling watcher at once too: the holder unlocks.
func TestWatchSeesAdvisoryRelease(t *testing.T) {
	w := watchHolder(t, context.Background(), freeWaitModes[1])
	if err := w.holder.Release(context.Background(), w.name, "a", w.held.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	waitFor(t, w.ch, "a free record after Release", isFree)
}

// A watch whose context ends, or whose Backend closes, while it waits for
// the holder's lock returns, withdraws its lock request and closes its
// connections: no goroutine and no session is left behind.
func TestWatchEndsWhileWaitingForLock(t *testing.T) {
	for _, end := range []string{"cancel", "close"} {
		t.Run(end, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := watchHolder(t, ctx, "advisory=true")
			switch end {
			case "cancel":
				cancel()
			case "close":
				if err := w.watcher.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
			}
			timeout := time.After(20 * time.Second)
		drain:
			for {
				select {
				case _, ok := <-w.ch:
					if !ok {
						break drain
					}
				case <-timeout:
					t.Fatal("the watch did not end within 20 s")
				}
			}
			// The watch goroutine stops and closes the freeWait before it
			// closes the channel.
			buf := make([]byte, 1<<20)
			stacks := string(buf[:runtime.Stack(buf, true)])
			if strings.Contains(stacks, "waitFree") {
				t.Fatalf("a freeWait goroutine is left:\n%s", stacks)
			}
			eventually(t, "the lock request withdrawn", func() bool { return lockRequests(t, w.sql, w.name, "ShareLock", false) == 0 })
			// Only the holder's session is left with the lock.
			if n := lockRequests(t, w.sql, w.name, "ExclusiveLock", true); n != 1 {
				t.Fatalf("sessions holding the lock: got %d, want 1", n)
			}
		})
	}
}

// A holder that acquires just after its predecessor died, while several
// watchers saw the death at once (each took the lock shared for an
// instant), is still marked live: its own death is noticed at once too.
func TestNewHolderAfterDeathIsLive(t *testing.T) {
	sql := sqlConn(t)
	ctx := context.Background()
	for round := range 5 {
		name := leasekittest.Name(t) + "-" + string(rune('a'+round))
		holder := openAdvisory(t, "advisory=true")
		_, err := holder.Acquire(ctx, name, "a", time.Minute)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		watchers := make([]*Backend, 3)
		chans := make([]<-chan lease.Record, 3)
		for i := range watchers {
			watchers[i] = openAdvisory(t, "advisory=true")
			chans[i], err = watchers[i].Watch(ctx, name)
			if err != nil {
				t.Fatalf("Watch: %v", err)
			}
		}
		eventually(t, "the watchers' waits for the lock", func() bool { return lockRequests(t, sql, name, "ShareLock", false) == 3 })
		if err := holder.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		waitFor(t, chans[0], "a free record after the holder's session ended", isFree)
		b, err := watchers[0].Acquire(ctx, name, "b", time.Minute)
		if err != nil {
			t.Fatalf("Acquire after the death: %v", err)
		}
		var live bool
		err = sql.QueryRow(ctx, `SELECT live FROM coord_lease WHERE name = $1`, name).Scan(&live)
		if err != nil || !live {
			t.Fatalf("round %d: the new holder's row: live %v, %v", round, live, err)
		}
		waitFor(t, chans[1], "the new holder's record", func(r lease.Record) bool { return r.Token == b.Token })
	}
}

// tryLock retries while the lock is held only shared (by watchers, for an
// instant), and not while a session holds it exclusively (a live holder).
func TestTryLockRetriesPastSharedHolders(t *testing.T) {
	ctx, name := context.Background(), leasekittest.Name(t)
	other, conn := sqlConn(t), sqlConn(t)
	lock := func(sql string) {
		_, err := other.Exec(ctx, sql, advisoryClass, name)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	// Held shared, let go during the first pause: taken at the second try.
	lock(`SELECT pg_advisory_lock_shared($1, hashtext($2))`)
	pauses := 0
	took, err := tryLock(ctx, conn, name, func(context.Context, int) bool {
		pauses++
		lock(`SELECT pg_advisory_unlock_shared($1, hashtext($2))`)
		return true
	})
	if err != nil || !took {
		t.Fatalf("tryLock after the shared holder let go: took %v, %v", took, err)
	}
	if pauses != 1 {
		t.Fatalf("pauses: got %v, want %v", pauses, 1)
	}
	_, err = conn.Exec(ctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, advisoryClass, name)
	if err != nil {
		t.Fatalf("unlock: %v", err)
	}

	// Held shared throughout: as many tries as pause allows.
	lock(`SELECT pg_advisory_lock_shared($1, hashtext($2))`)
	pauses = 0
	took, err = tryLock(ctx, conn, name, func(_ context.Context, attempt int) bool { pauses++; return attempt < 3 })
	if err != nil || took {
		t.Fatalf("tryLock while held shared: took %v, %v", took, err)
	}
	if pauses != 4 {
		t.Fatalf("pauses: got %v, want %v", pauses, 4)
	}
	lock(`SELECT pg_advisory_unlock_shared($1, hashtext($2))`)

	// Held exclusively: no retry.
	lock(`SELECT pg_advisory_lock($1, hashtext($2))`)
	pauses = 0
	took, err = tryLock(ctx, conn, name, func(context.Context, int) bool { pauses++; return true })
	if err != nil || took {
		t.Fatalf("tryLock while held exclusively: took %v, %v", took, err)
	}
	if pauses != 0 {
		t.Fatalf("pauses: got %v, want %v", pauses, 0)
	}
}

// A wait that fails (here the server ends the watcher's waiting session) is
// no proof that the holder died: the watch reports nothing, waits again
// after a pause, and still sees the holder's death at once.
func TestFailedLockWaitIsNotADeath(t *testing.T) {
	ctx := context.Background()
	w := watchHolder(t, ctx, "advisory=true")
	holder, name, a, ch, sql := w.holder, w.name, w.held, w.ch, w.sql
	_, err := sql.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'
		AND classid = $1 AND objid = hashtext($2)::oid AND objsubid = 2 AND mode = 'ShareLock' AND NOT granted`, advisoryClass, name)
	if err != nil {
		t.Fatalf("pg_terminate_backend: %v", err)
	}
	eventually(t, "the failed wait gone", func() bool { return lockRequests(t, sql, name, "ShareLock", false) == 0 })
	// Each renewal makes the watch read the row; after freeWaitPause, a
	// read starts a new wait.
	eventually(t, "a new wait for the lock", func() bool {
		_, err := holder.Renew(ctx, name, "a", a.Token, time.Minute)
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
		return lockRequests(t, sql, name, "ShareLock", false) == 1
	})
	for drained := false; !drained; {
		select {
		case rec, ok := <-ch:
			if !ok || rec.Holder != "a" {
				t.Fatalf("the watch after its wait failed: %+v (open %v)", rec, ok)
			}
		default:
			drained = true
		}
	}
	if err := holder.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitFor(t, ch, "a free record after the holder's session ended", isFree)
}

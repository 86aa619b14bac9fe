package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"coord/internal/leasekit"
)

// freeWaitPause is how long a watch waits before it starts another freeWait
// after one failed (the server restarted, the connection was cut, or it
// could not connect), or after a grant the row did not confirm: a failing
// server must not be hammered with connections.
const freeWaitPause = time.Second

// freeWait is a watch's wait, with Advisory, for the advisory lock of a live
// holder to come free. No notification announces a closed session, but a
// lock request does: on a connection of the watch's own, a statement waits
// in pg_advisory_xact_lock_shared while a session holds the name's lock
// exclusively, and PostgreSQL grants it the moment none does: the holder's
// session has ended (the process died, its connection was cut, the server
// ended it) or it released the lease, which unlocks. The lock is
// transaction-scoped, so it is let go when the statement commits, an
// instant after the grant, with no round trip in between. The grant wakes
// the watch, which reads the row: Get's own test then reports a dead holder
// free. A grant is only a reason to read; the read decides.
//
// An error proves nothing (a server restart, a cut connection, a
// cancelled statement): the watch goes on as without Advisory, reading at
// notifications and expiries, and starts a new wait at a read after
// freeWaitPause. The lock is the name's, not a tenure's, so a wait outlives
// changes of the row: whichever session holds the lock, the grant means
// none does any longer. A wait stays blocked if the row stops marking a
// live holder (the lock's session then still holds it, and lets it go
// later); it ends with the watch.
//
// freeWait is not safe for concurrent use: the watch goroutine starts,
// reaps and stops it. While a wait runs, the statement runs on a goroutine
// of its own, which owns the connection until it sends its result. A nil
// *freeWait (without Advisory) does nothing.
type freeWait struct {
	b    *Backend
	name string
	conn *pgx.Conn // nil before the first wait and after a failure

	// Set while a wait runs.
	running bool
	token   uint64             // the tenure it was started for
	cancel  context.CancelFunc // ends it
	ended   context.Context    // done once it has sent its result
	result  chan freeResult

	granted    uint64    // the tenure whose wait was last granted
	pauseUntil time.Time // no wait before this time ...
	pauseToken uint64    // ... for this tenure (0: for any)
}

// freeResult is a wait's outcome: the connection (nil if it failed) and the
// error, nil when the lock was granted.
type freeResult struct {
	conn *pgx.Conn
	err  error
}

// start starts a wait if r's holder is marked live and none runs.
func (w *freeWait) start(ctx context.Context, r reading) {
	if w == nil || w.running || !r.live || r.rec.Free() {
		return
	}
	now := time.Now()
	if w.granted != 0 && w.granted == r.rec.Token {
		// The lock came free, yet the row says this holder still holds
		// it: another session has taken the lock and is about to update
		// the row, whose notification will follow. Waiting now would be
		// granted at once, again and again if anything went wrong.
		w.granted = 0
		w.pauseUntil, w.pauseToken = now.Add(freeWaitPause), r.rec.Token
	}
	if now.Before(w.pauseUntil) && (w.pauseToken == 0 || w.pauseToken == r.rec.Token) {
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	ended, end := context.WithCancel(context.Background())
	w.running, w.token, w.cancel, w.ended = true, r.rec.Token, cancel, ended
	result := make(chan freeResult, 1)
	w.result = result
	b, name, conn := w.b, w.name, w.conn
	w.conn = nil
	go func() {
		conn, err := b.waitFree(wctx, conn, name)
		result <- freeResult{conn, err}
		end()
	}()
}

// over returns a context done once the running wait has ended, or nil if
// none runs.
func (w *freeWait) over() context.Context {
	if w == nil || !w.running {
		return nil
	}
	return w.ended
}

// reap collects the result of a wait that has ended, if any.
func (w *freeWait) reap() {
	if w == nil || !w.running || w.ended.Err() == nil {
		return
	}
	res := <-w.result
	w.cancel()
	w.running, w.conn = false, res.conn
	if res.err != nil {
		w.pauseUntil, w.pauseToken = time.Now().Add(freeWaitPause), 0
		return
	}
	w.granted = w.token
}

// stop ends the running wait, if any, and closes the connection. The
// cancelled statement makes pgx close the connection, after a cancel
// request that withdraws the lock request on the server.
func (w *freeWait) stop() {
	if w == nil {
		return
	}
	if w.running {
		w.cancel()
		res := <-w.result
		w.running, w.conn = false, res.conn
	}
	closeConn(w.conn)
	w.conn = nil
}

// waitFree waits on conn (connected first if nil) until no session holds
// name's advisory lock exclusively. It returns the connection, still
// usable, or nil with the error.
func (b *Backend) waitFree(ctx context.Context, conn *pgx.Conn, name string) (*pgx.Conn, error) {
	if conn == nil {
		cfg := b.cfg.Pool.ConnConfig.Copy()
		if cfg.RuntimeParams == nil {
			cfg.RuntimeParams = map[string]string{}
		}
		// The statement waits as long as a tenure lasts: a server default
		// must not cut it short.
		cfg.RuntimeParams["lock_timeout"] = "0"
		cfg.RuntimeParams["statement_timeout"] = "0"
		dctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
		var err error
		conn, err = pgx.ConnectConfig(dctx, cfg)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1, hashtext($2))`, advisoryClass, name); err != nil {
		closeConn(conn)
		return nil, err
	}
	return conn, nil
}

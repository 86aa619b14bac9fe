package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"coord/internal/leasekit"
	"coord/lease"
)

// healthInterval is the longest a LISTEN watch waits without reading the
// row: the read doubles as a check that its connection still works.
const healthInterval = 5 * time.Second

// Watch implements lease.Backend. With Listen (the default) it LISTENs on a
// connection of its own and reads the row on every notification about the
// name, at the expiry it read, and every healthInterval; otherwise it polls.
// With Advisory, while the row marks its holder live, it also waits on a
// second connection for the holder's advisory lock to come free (see
// freeWait), and reads the row as soon as it does. The channel closes when
// its connection fails.
func (b *Backend) Watch(ctx context.Context, name string) (<-chan lease.Record, error) {
	if err := leasekit.CheckName(prefix, name); err != nil {
		return nil, err
	}
	if err := b.life.Check(prefix); err != nil {
		return nil, err
	}
	var conn *pgx.Conn
	var q querier = b.pool
	if b.cfg.Listen {
		var err error
		if conn, err = b.listen(ctx); err != nil {
			return nil, b.fail("watch", name, err)
		}
		q = conn
	}
	r, err := b.read(ctx, q, name)
	if err != nil {
		closeConn(conn)
		return nil, err
	}
	feed := leasekit.NewFeed()
	feed.Send(r.rec, r.version)

	err = b.life.Go(ctx, prefix, func(ctx context.Context) {
		defer feed.Close()
		defer closeConn(conn)
		b.watch(ctx, name, conn, q, feed, r)
	})
	if err != nil {
		closeConn(conn)
		return nil, err
	}
	return feed.C(), nil
}

// listen opens a connection of the watch's own and LISTENs on the table's
// channel; the row is read after LISTEN, so no change goes unseen.
func (b *Backend) listen(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, b.cfg.Pool.ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{b.cfg.Table}.Sanitize()); err != nil {
		closeConn(conn)
		return nil, err
	}
	return conn, nil
}

// watch waits for a reason to read the row (a notification about name, the
// expiry it read, a health check or poll period, with Advisory the live
// holder's lock coming free) and sends what it reads.
func (b *Backend) watch(ctx context.Context, name string, conn *pgx.Conn, q querier, feed *leasekit.Feed, r reading) {
	var free *freeWait
	if b.cfg.Advisory {
		free = &freeWait{b: b, name: name}
		defer free.stop()
	}
	for {
		free.start(ctx, r)
		wait := healthInterval
		if conn == nil {
			wait = leasekit.Jitter(b.cfg.PollInterval, 0.2)
		}
		if !r.rec.Free() {
			wait = min(wait, max(time.Until(r.rec.Expiry)+time.Millisecond, time.Millisecond))
		}
		if conn != nil {
			if !waitNotification(ctx, conn, name, wait, free.over()) {
				return
			}
		} else if !sleep(ctx, wait, free.over()) {
			return
		}
		free.reap()
		var err error
		if r, err = b.read(ctx, q, name); err != nil {
			return
		}
		feed.Send(r.rec, r.version)
	}
}

// waitNotification waits up to wait for a notification about name, or until
// wake (if not nil) is done. It reports false when the connection failed or
// ctx is done.
func waitNotification(ctx context.Context, conn *pgx.Conn, name string, wait time.Duration, wake context.Context) bool {
	deadline := time.Now().Add(wait)
	for {
		wctx, cancel := context.WithDeadline(ctx, deadline)
		unhook := func() bool { return false }
		if wake != nil {
			// The cancellation interrupts the read by a deadline on the
			// socket (pgx's default), which leaves the connection usable.
			unhook = context.AfterFunc(wake, cancel)
		}
		n, err := conn.WaitForNotification(wctx)
		unhook()
		cancel()
		switch {
		case err == nil && n.Payload == name:
			return true
		case err == nil:
			continue // another lease in the same table
		case ctx.Err() != nil:
			return false
		case conn.IsClosed():
			return false
		case wake != nil && wake.Err() != nil:
			return true // the holder's advisory lock came free: read
		case time.Now().After(deadline):
			return true // timed out: read anyway
		default:
			return false
		}
	}
}

// sleep waits for d, or until wake (if not nil) is done. It reports false
// when ctx is done.
func sleep(ctx context.Context, d time.Duration, wake context.Context) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	var woken <-chan struct{}
	if wake != nil {
		woken = wake.Done()
	}
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	case <-woken:
		return true
	}
}

// closeConn closes conn, and waits (at most closeWait) for pgx to finish
// with its socket: a connection closed by a cancelled query is closed in
// the background, after a cancel request to the server.
func closeConn(conn *pgx.Conn) {
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	_ = conn.Close(ctx)
	select {
	case <-conn.PgConn().CleanupDone():
	case <-ctx.Done():
	}
}

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
// The channel closes when its connection fails.
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
	rec, version, err := b.get(ctx, q, name)
	if err != nil {
		closeConn(conn)
		return nil, err
	}
	feed := leasekit.NewFeed()
	feed.Send(rec, version)

	err = b.life.Go(ctx, prefix, func(ctx context.Context) {
		defer feed.Close()
		defer closeConn(conn)
		b.watch(ctx, name, conn, q, feed, rec)
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
// expiry it read, a health check or poll period) and sends what it reads.
func (b *Backend) watch(ctx context.Context, name string, conn *pgx.Conn, q querier, feed *leasekit.Feed, rec lease.Record) {
	for {
		wait := healthInterval
		if conn == nil {
			wait = leasekit.Jitter(b.cfg.PollInterval, 0.2)
		}
		if !rec.Free() {
			wait = min(wait, max(time.Until(rec.Expiry)+time.Millisecond, time.Millisecond))
		}
		if conn != nil {
			if !waitNotification(ctx, conn, name, wait) {
				return
			}
		} else if !sleep(ctx, wait) {
			return
		}
		var version int64
		var err error
		rec, version, err = b.get(ctx, q, name)
		if err != nil {
			return
		}
		feed.Send(rec, version)
	}
}

// waitNotification waits up to wait for a notification about name. It
// reports false when the connection failed or ctx is done.
func waitNotification(ctx context.Context, conn *pgx.Conn, name string, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		wctx, cancel := context.WithDeadline(ctx, deadline)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil && n.Payload == name:
			return true
		case err == nil:
			continue // another lease in the same table
		case ctx.Err() != nil:
			return false
		case time.Now().After(deadline) && !conn.IsClosed():
			return true // timed out: read anyway
		default:
			return false
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func closeConn(conn *pgx.Conn) {
	if conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(ctx)
		cancel()
	}
}

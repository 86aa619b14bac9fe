package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"coord/internal/leasekit"
	"coord/lease"
)

// healthInterval is how long a watch waits without any message before it
// pings its connection; a second silent interval ends the watch, so that a
// connection lost without a reset (a partition) is noticed.
const healthInterval = 5 * time.Second

// Watch implements lease.Backend: pushed by pub/sub (coord's own changes,
// and expired-key events when the server emits them), and woken by a timer
// at the expiry it last read. The channel closes when the subscription's
// connection fails.
func (b *Backend) Watch(ctx context.Context, name string) (<-chan lease.Record, error) {
	if err := leasekit.CheckName(prefix, name); err != nil {
		return nil, err
	}
	if err := b.life.Check(prefix); err != nil {
		return nil, err
	}
	b.enableKeyspaceEvents(ctx)
	expired := fmt.Sprintf("__keyevent@%d__:expired", b.cfg.Options.DB)
	ps := b.client.Subscribe(context.WithoutCancel(ctx), b.channel(), expired)
	// Wait for both confirmations before the first read, so that no change
	// between the read and the subscription goes unseen.
	rctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	defer cancel()
	for confirmed := 0; confirmed < 2; {
		msg, err := ps.Receive(rctx)
		if err != nil {
			ps.Close()
			return nil, b.fail("watch", name, err)
		}
		if _, ok := msg.(*goredis.Subscription); ok {
			confirmed++
		}
	}
	rec, err := b.Get(rctx, name)
	if err != nil {
		ps.Close()
		return nil, err
	}
	feed := leasekit.NewFeed()
	feed.Send(rec, rec.Expiry.UnixNano())

	// The watch ends when ctx is done, when the Backend closes, or when
	// listen returns; closing ps unblocks listen's receive.
	err = b.life.Go(ctx, prefix, func(ctx context.Context) {
		context.AfterFunc(ctx, func() { ps.Close() })
		defer feed.Close()
		b.listen(ctx, name, ps, feed, rec)
	})
	if err != nil {
		ps.Close()
		return nil, err
	}
	return feed.C(), nil
}

// listen re-reads the record on every message about it, at its expiry, and
// after reconnects, until the connection fails or ctx is done.
func (b *Backend) listen(ctx context.Context, name string, ps *goredis.PubSub, feed *leasekit.Feed, rec lease.Record) {
	key := b.leaseKey(name)
	silent := 0
	for {
		wait := healthInterval
		if !rec.Free() && !rec.Expiry.IsZero() {
			wait = min(wait, max(time.Until(rec.Expiry)+time.Millisecond, time.Millisecond))
		}
		msg, err := ps.ReceiveTimeout(ctx, wait)
		var netErr net.Error
		switch {
		case err == nil:
			silent = 0
			switch m := msg.(type) {
			case *goredis.Message:
				if m.Payload != name && m.Payload != key {
					continue
				}
			case *goredis.Pong:
				continue
			}
			// A message about this lease, or a (re)subscription after a
			// reconnect, when messages may have been missed: read.
		case errors.As(err, &netErr) && netErr.Timeout() && ctx.Err() == nil:
			if rec.Free() || rec.Expiry.IsZero() || time.Until(rec.Expiry) > 0 {
				silent++
				if silent >= 2 {
					return // two health intervals without even a pong
				}
				if ps.Ping(ctx) != nil {
					return
				}
				continue
			}
			// The expiry we read has passed: read.
		default:
			return
		}
		rec, err = b.Get(ctx, name)
		if err != nil {
			return
		}
		feed.Send(rec, rec.Expiry.UnixNano())
	}
}

package sqlite

import (
	"context"
	"time"

	"coord/internal/leasekit"
	"coord/lease"
)

// Watch implements lease.Backend by polling: it reads the record every
// PollInterval (plus jitter) and at the expiry it last read, and sends it
// when holder, token or expiry changed. SQLite cannot push a change to
// another process. A read that fails closes the channel.
func (b *Backend) Watch(ctx context.Context, name string) (<-chan lease.Record, error) {
	if err := leasekit.CheckName(prefix, name); err != nil {
		return nil, err
	}
	rec, expiry, err := b.get(ctx, name)
	if err != nil {
		return nil, err
	}
	feed := leasekit.NewFeed()
	feed.Send(rec, expiry)
	err = b.life.Go(ctx, prefix, func(ctx context.Context) {
		defer feed.Close()
		b.poll(ctx, name, feed, rec)
	})
	if err != nil {
		return nil, err
	}
	return feed.C(), nil
}

func (b *Backend) poll(ctx context.Context, name string, feed *leasekit.Feed, rec lease.Record) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		wait := leasekit.Jitter(b.cfg.PollInterval, 0.2)
		if !rec.Free() {
			wait = min(wait, time.Until(rec.Expiry)+time.Millisecond)
		}
		timer.Reset(max(wait, time.Millisecond))
		select {
		case <-ctx.Done(): // the caller's, or the Backend closed
			return
		case <-timer.C:
		}
		var expiry int64
		var err error
		rec, expiry, err = b.get(ctx, name)
		if err != nil {
			return
		}
		feed.Send(rec, expiry)
	}
}

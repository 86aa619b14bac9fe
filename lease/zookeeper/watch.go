package zookeeper

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"coord/internal/leasekit"
	"coord/lease"
)

// Watch implements lease.Backend with ZooKeeper watches on the lease's
// node, set on the shared session by the very read that returns the
// record, so that no change between a read and its watch is missed. A
// watch fires once; each firing reads the node again and sets the next.
// The zk client sets its watches again after a reconnection within the
// session, and the server then fires those whose node changed meanwhile.
// The channel closes when ctx is done, on Close, and when the shared
// session expires (its watches are gone).
func (b *Backend) Watch(ctx context.Context, name string) (<-chan lease.Record, error) {
	if err := b.checkLeaseName(name); err != nil {
		return nil, err
	}
	if err := b.life.Check(prefix); err != nil {
		return nil, err
	}
	rctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
	rec, czxid, events, err := b.readWatch(rctx, name)
	cancel()
	if err != nil {
		return nil, err
	}
	feed := leasekit.NewFeed()
	feed.Send(rec, czxid)
	err = b.life.Go(ctx, prefix, func(ctx context.Context) {
		defer feed.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-events:
				if ev.Type == zk.EventNotWatching || ev.Err != nil {
					return // the session expired or closed: its watches with it
				}
			}
			var err error
			if rec, czxid, events, err = b.readWatch(ctx, name); err != nil {
				return
			}
			feed.Send(rec, czxid)
		}
	})
	if err != nil {
		return nil, err
	}
	return feed.C(), nil
}

// readWatch reads the record of name and sets a watch on its node: a data
// watch (fires on change or deletion) if it exists, else an exists watch
// (fires on creation). It returns the node's czxid (0 when free), which
// tells apart two tenures of one holder.
func (b *Backend) readWatch(ctx context.Context, name string) (lease.Record, int64, <-chan zk.Event, error) {
	path := b.nodePath(name)
	type watched struct {
		data   []byte
		stat   *zk.Stat
		events <-chan zk.Event
	}
	for range 10 { // a node that keeps appearing and vanishing between two reads
		w, err := callIdempotent(ctx, b.shared, func(c *zk.Conn) (watched, error) {
			data, stat, events, err := c.GetW(path)
			return watched{data, stat, events}, err
		})
		if err == nil {
			rec, err := decode(name, w.data, w.stat)
			if err != nil {
				return lease.Record{}, 0, nil, fmt.Errorf("%s: watch %q: %w", prefix, name, err)
			}
			return rec, w.stat.Czxid, w.events, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return lease.Record{}, 0, nil, b.refusal("watch", name, err)
		}
		w, err = callIdempotent(ctx, b.shared, func(c *zk.Conn) (watched, error) {
			ok, _, events, err := c.ExistsW(path)
			if err == nil && ok {
				err = zk.ErrNodeExists // created since: read it
			}
			return watched{events: events}, err
		})
		if err == nil {
			return lease.Record{Name: name}, 0, w.events, nil
		}
		if !errors.Is(err, zk.ErrNodeExists) {
			return lease.Record{}, 0, nil, b.refusal("watch", name, err)
		}
	}
	return lease.Record{}, 0, nil, leasekit.Unavailable(prefix, "watch", name, errors.New("the node changed at every read"))
}

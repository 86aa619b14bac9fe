package etcd

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"coord/internal/leasekit"
	"coord/lease"
)

// Watch implements lease.Backend with an etcd watch on the key, from just
// after the revision of the first read, so that no change is missed. The
// channel closes when the watch is cancelled: ctx, Close, a compaction past
// the revision, or the member losing its leader.
func (b *Backend) Watch(ctx context.Context, name string) (<-chan lease.Record, error) {
	if err := leasekit.CheckName(prefix, name); err != nil {
		return nil, err
	}
	rec, rev, err := b.get(ctx, name)
	if err != nil {
		return nil, err
	}
	feed := leasekit.NewFeed()
	feed.Send(rec, rev)

	err = b.life.Go(ctx, prefix, func(ctx context.Context) {
		defer feed.Close()
		events := b.client.Watch(clientv3.WithRequireLeader(ctx), b.key(name), clientv3.WithRev(rev+1))
		b.watch(ctx, name, events, feed)
	})
	if err != nil {
		return nil, err
	}
	return feed.C(), nil
}

func (b *Backend) watch(ctx context.Context, name string, events clientv3.WatchChan, feed *leasekit.Feed) {
	for resp := range events {
		if resp.Err() != nil || resp.Canceled {
			return
		}
		if len(resp.Events) == 0 {
			continue // progress notification
		}
		ev := resp.Events[len(resp.Events)-1] // coalesce: the latest state
		var kv *mvccpb.KeyValue
		if ev.Type == clientv3.EventTypePut {
			kv = ev.Kv
		}
		rctx, cancel := leasekit.Bound(ctx, b.cfg.Timeout)
		rec, err := b.record(rctx, name, kv, time.Now())
		cancel()
		if err != nil {
			return
		}
		feed.Send(rec, ev.Kv.ModRevision)
	}
}

package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
)

// A watch that must not end on its own before the test acts waits this
// long; a test that passes never waits it out.
const watchForever = time.Minute

// TestWatchKey long-polls keys of a three-node cluster: a watch whose
// revision is already past answers at once, one that waits answers when a
// concurrent write changes the key (a put, a delete, a creation), one that
// sees nothing answers at its bound with the key unchanged, and one whose
// context ends answers with the context's error.
func TestWatchKey(t *testing.T) {
	cluster := startCluster(t, 3)
	c := cluster.client()
	ctx := testContext(t)

	t.Run("AlreadyPast", func(t *testing.T) {
		first, err := c.Put(ctx, "past", []byte("v1"))
		if err != nil {
			t.Fatal(err)
		}
		current, err := c.Put(ctx, "past", []byte("v2"))
		if err != nil {
			t.Fatal(err)
		}
		// A watch that waited its whole bound would outlast ctx and fail.
		for _, from := range []uint64{0, first, current + 1, math.MaxUint64} {
			kv, err := c.WatchKey(ctx, "past", from, 10*watchForever)
			if err != nil || kv.Key != "past" || string(kv.Value) != "v2" || kv.Revision != current {
				t.Fatalf("watch from %d: %+v %v, want v2 at %d", from, kv, err, current)
			}
		}
		kv, err := c.WatchKey(ctx, "absent", 1, 10*watchForever)
		if err != nil || kv.Key != "absent" || kv.Revision != 0 || kv.Value != nil {
			t.Fatalf("watch of an absent key from 1: %+v %v, want absent", kv, err)
		}
	})

	t.Run("ConcurrentPut", func(t *testing.T) {
		rev, err := c.Put(ctx, "changes", []byte("before"))
		if err != nil {
			t.Fatal(err)
		}
		reached := cluster.awaitLeader("/v1/watch/kv/changes")
		done := watchKey(ctx, c, "changes", rev, watchForever)
		within(t, reached, "watch reaching the leader")
		select {
		case r := <-done:
			t.Fatalf("the watch answered before the key changed: %+v %v", r.v, r.err)
		default:
		}
		next, err := c.Put(ctx, "changes", []byte("after"))
		if err != nil {
			t.Fatal(err)
		}
		r := within(t, done, "watch after a put")
		if r.err != nil || string(r.v.Value) != "after" || r.v.Revision != next || r.v.Version != 2 {
			t.Fatalf("watch: %+v %v, want after at %d, version 2", r.v, r.err, next)
		}
	})

	t.Run("ConcurrentDelete", func(t *testing.T) {
		rev, err := c.Put(ctx, "doomed", []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		reached := cluster.awaitLeader("/v1/watch/kv/doomed")
		done := watchKey(ctx, c, "doomed", rev, watchForever)
		within(t, reached, "watch reaching the leader")
		if _, err := c.DeleteIf(ctx, "doomed", rev); err != nil {
			t.Fatal(err)
		}
		r := within(t, done, "watch after a delete")
		if r.err != nil || r.v.Key != "doomed" || r.v.Revision != 0 || r.v.Value != nil {
			t.Fatalf("watch: %+v %v, want the key absent", r.v, r.err)
		}
	})

	t.Run("ConcurrentCreate", func(t *testing.T) {
		reached := cluster.awaitLeader("/v1/watch/kv/newborn")
		done := watchKey(ctx, c, "newborn", 0, watchForever)
		within(t, reached, "watch reaching the leader")
		rev, err := c.PutIf(ctx, "newborn", []byte{0xff, 0x00, 0xfe}, 0) // not UTF-8: sent as base64
		if err != nil {
			t.Fatal(err)
		}
		r := within(t, done, "watch after a create")
		if r.err != nil || string(r.v.Value) != "\xff\x00\xfe" || r.v.Revision != rev || r.v.CreateRevision != rev {
			t.Fatalf("watch: %+v %v, want the new key at %d", r.v, r.err, rev)
		}
	})

	t.Run("OtherKeysDoNotWakeIt", func(t *testing.T) {
		rev, err := c.Put(ctx, "quiet", []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		reached := cluster.awaitLeader("/v1/watch/kv/quiet")
		done := watchKey(ctx, c, "quiet", rev, watchForever)
		within(t, reached, "watch reaching the leader")
		// Writes to other keys, a prefix and an extension of it among
		// them, wake the watch's loop on the server but do not answer it.
		for _, other := range []string{"quie", "quiet/", "quiet2", "Quiet"} {
			if _, err := c.Put(ctx, other, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case r := <-done:
			t.Fatalf("a write to another key answered the watch: %+v %v", r.v, r.err)
		default:
		}
		next, err := c.Put(ctx, "quiet", []byte("w"))
		if err != nil {
			t.Fatal(err)
		}
		if r := within(t, done, "watch"); r.err != nil || r.v.Revision != next {
			t.Fatalf("watch: %+v %v, want revision %d", r.v, r.err, next)
		}
	})

	t.Run("WaitBound", func(t *testing.T) {
		rev, err := c.Put(ctx, "still", []byte("same"))
		if err != nil {
			t.Fatal(err)
		}
		for _, wait := range []time.Duration{0, 500 * time.Microsecond, 200 * time.Millisecond} {
			kv, err := c.WatchKey(ctx, "still", rev, wait)
			if err != nil || string(kv.Value) != "same" || kv.Revision != rev {
				t.Fatalf("watch for %v: %+v %v, want same at %d", wait, kv, err, rev)
			}
		}
		kv, err := c.WatchKey(ctx, "still-absent", 0, 200*time.Millisecond)
		if err != nil || kv.Key != "still-absent" || kv.Revision != 0 {
			t.Fatalf("watch of an absent key: %+v %v, want absent", kv, err)
		}
	})

	t.Run("ContextCancelled", func(t *testing.T) {
		rev, err := c.Put(ctx, "abandoned", []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		reached := cluster.awaitLeader("/v1/watch/kv/abandoned")
		done := watchKey(wctx, c, "abandoned", rev, watchForever)
		within(t, reached, "watch reaching the leader")
		cancel()
		// Promptly: well before the watch's own bound.
		if r := within(t, done, "cancelled watch"); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled watch: %+v %v, want context.Canceled", r.v, r.err)
		}
		dctx, dcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer dcancel()
		if _, err := c.WatchKey(dctx, "abandoned", rev, watchForever); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("watch past its context's deadline: %v, want context.DeadlineExceeded", err)
		}
		// The client still works.
		mustGet(t, ctx, c, "abandoned", "v", rev)
	})

	t.Run("ThroughAFollower", func(t *testing.T) {
		// The follower serves the long poll itself, after a read index
		// from the leader (it no longer forwards key watches); it sees
		// the leader's next write, and cancelling the watch ends it there.
		fep := cluster.follower()
		f := cluster.client(fep)
		rev, err := c.Put(ctx, "relayed", []byte("v1"))
		if err != nil {
			t.Fatal(err)
		}
		reached := cluster.awaitAt(fep, "/v1/watch/kv/relayed")
		done := watchKey(ctx, f, "relayed", rev, watchForever)
		within(t, reached, "watch reaching the follower")
		next, err := c.Put(ctx, "relayed", []byte("v2"))
		if err != nil {
			t.Fatal(err)
		}
		if r := within(t, done, "watch at the follower"); r.err != nil || string(r.v.Value) != "v2" || r.v.Revision != next {
			t.Fatalf("watch at the follower: %+v %v, want v2 at %d", r.v, r.err, next)
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		reached = cluster.awaitAt(fep, "/v1/watch/kv/relayed")
		done = watchKey(wctx, f, "relayed", next, watchForever)
		within(t, reached, "watch reaching the follower")
		cancel()
		if r := within(t, done, "cancelled watch at the follower"); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled watch at the follower: %+v %v, want context.Canceled", r.v, r.err)
		}
	})

	t.Run("ManyWatchersOneWrite", func(t *testing.T) {
		const watchers = 16
		rev, err := c.Put(ctx, "crowd", []byte("v1"))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		results := make([]result[KeyValue], watchers)
		started := make(chan struct{}, watchers)
		for i := range watchers {
			wg.Go(func() {
				started <- struct{}{}
				kv, err := c.WatchKey(ctx, "crowd", rev, watchForever)
				results[i] = result[KeyValue]{kv, err}
			})
		}
		for range watchers {
			within(t, started, "watchers starting")
		}
		next, err := c.Put(ctx, "crowd", []byte("v2"))
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait() // ctx bounds every watch
		for i, r := range results {
			if r.err != nil || string(r.v.Value) != "v2" || r.v.Revision != next {
				t.Fatalf("watcher %d: %+v %v, want v2 at %d", i, r.v, r.err, next)
			}
		}
	})

	t.Run("FollowAKey", func(t *testing.T) {
		// A watcher that watches again from each answer's revision, while
		// a writer writes 1 to 20, sees revisions and values only grow,
		// and ends at the last write.
		const writes = 20
		rev, err := c.Put(ctx, "followed", []byte("0"))
		if err != nil {
			t.Fatal(err)
		}
		writer := make(chan error, 1)
		go func() {
			for i := 1; i <= writes; i++ {
				if _, err := c.Put(ctx, "followed", fmt.Appendf(nil, "%d", i)); err != nil {
					writer <- err
					return
				}
			}
			writer <- nil
		}()
		for seen, value := rev, 0; value != writes; {
			kv, err := c.WatchKey(ctx, "followed", seen, watchForever)
			var next int
			if _, serr := fmt.Sscan(string(kv.Value), &next); err != nil || serr != nil || kv.Revision <= seen || next <= value {
				t.Fatalf("watch from %d (value %d): %+v %v, want a later revision and value", seen, value, kv, err)
			}
			seen, value = kv.Revision, next
		}
		if err := within(t, writer, "writer"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("KeysThatNeedEscaping", func(t *testing.T) {
		for _, key := range []string{"a/b", "a b", "100%", "q?x=1", "h#frag", "../up", "%2F", ".", ".."} {
			rev, err := c.Put(ctx, key, []byte(key))
			if err != nil {
				t.Fatalf("put %q: %v", key, err)
			}
			kv, err := c.WatchKey(ctx, key, 0, watchForever)
			if err != nil || kv.Key != key || string(kv.Value) != key || kv.Revision != rev {
				t.Fatalf("watch %q: %+v %v, want it at %d", key, kv, err, rev)
			}
		}
	})

	t.Run("BadArguments", func(t *testing.T) {
		// Refused before a request, not watched for the whole wait.
		bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := c.WatchKey(bctx, "", 0, watchForever); !errors.Is(err, ErrInvalid) {
			t.Fatalf("watch of the empty key: %v, want invalid", err)
		}
		if _, err := c.WatchKey(bctx, "k", 0, -time.Hour); !errors.Is(err, ErrInvalid) {
			t.Fatalf("watch for a negative wait: %v, want invalid", err)
		}
	})
}

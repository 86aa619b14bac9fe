package client

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

// TestConditionalWrites runs PutIf and DeleteIf against a three-node
// cluster: a right revision applies, a stale one is refused with the
// current revision and changes nothing, and a missing key is told apart.
func TestConditionalWrites(t *testing.T) {
	cluster := startCluster(t, 3)
	c := cluster.client()
	ctx := testContext(t)

	t.Run("PutIf", func(t *testing.T) {
		created, err := c.PutIf(ctx, "put-if", []byte("v1"), 0)
		if err != nil || created == 0 {
			t.Fatalf("create: %d %v", created, err)
		}
		_, err = c.PutIf(ctx, "put-if", []byte("again"), 0)
		if got := conflictRevision(t, err, "create an existing key"); got != created {
			t.Fatalf("conflict carries revision %d, want %d", got, created)
		}
		updated, err := c.PutIf(ctx, "put-if", []byte("v2"), created)
		if err != nil || updated <= created {
			t.Fatalf("update at %d: %d %v", created, updated, err)
		}
		_, err = c.PutIf(ctx, "put-if", []byte("stale"), created)
		if got := conflictRevision(t, err, "update at a stale revision"); got != updated {
			t.Fatalf("conflict carries revision %d, want %d", got, updated)
		}
		mustGet(t, ctx, c, "put-if", "v2", updated)
		_, err = c.PutIf(ctx, "put-if-missing", []byte("x"), updated)
		if got := conflictRevision(t, err, "update a missing key"); got != 0 {
			t.Fatalf("conflict on a missing key carries revision %d, want 0", got)
		}
		if _, err := c.Get(ctx, "put-if-missing"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a refused PutIf created the key: %v", err)
		}
	})

	t.Run("DeleteIf", func(t *testing.T) {
		first, err := c.Put(ctx, "delete-if", []byte("v1"))
		if err != nil {
			t.Fatal(err)
		}
		current, err := c.Put(ctx, "delete-if", []byte("v2"))
		if err != nil {
			t.Fatal(err)
		}
		for _, stale := range []uint64{first, 0, current + 1000} {
			_, err := c.DeleteIf(ctx, "delete-if", stale)
			if got := conflictRevision(t, err, fmt.Sprintf("delete at stale revision %d", stale)); got != current {
				t.Fatalf("conflict carries revision %d, want %d", got, current)
			}
			mustGet(t, ctx, c, "delete-if", "v2", current)
		}
		deleted, err := c.DeleteIf(ctx, "delete-if", current)
		if err != nil || deleted <= current {
			t.Fatalf("delete at %d: %d %v", current, deleted, err)
		}
		if _, err := c.Get(ctx, "delete-if"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get after DeleteIf: %v, want not found", err)
		}
		// The same delete again: the revision it names is gone.
		_, err = c.DeleteIf(ctx, "delete-if", current)
		if got := conflictRevision(t, err, "delete at a deleted revision"); got != 0 {
			t.Fatalf("conflict carries revision %d, want 0 (absent)", got)
		}
		// Created again, the key starts a new life.
		recreated, err := c.PutIf(ctx, "delete-if", []byte("v3"), 0)
		if err != nil || recreated <= deleted {
			t.Fatalf("recreate: %d %v", recreated, err)
		}
		kv, err := c.Get(ctx, "delete-if")
		if err != nil || kv.CreateRevision != recreated || kv.Version != 1 {
			t.Fatalf("recreated key %+v (%v): want created at %d, version 1", kv, err, recreated)
		}
	})

	t.Run("DeleteIfMissing", func(t *testing.T) {
		// prev 0 says "absent", which holds; there is nothing to delete.
		if _, err := c.DeleteIf(ctx, "never-written", 0); !errors.Is(err, ErrNotFound) {
			t.Fatalf("DeleteIf(missing, 0): %v, want not found", err)
		}
		_, err := c.DeleteIf(ctx, "never-written", 7)
		if got := conflictRevision(t, err, "DeleteIf(missing, 7)"); got != 0 {
			t.Fatalf("conflict carries revision %d, want 0", got)
		}
		if _, err := c.DeleteIf(ctx, "", 1); !errors.Is(err, ErrInvalid) {
			t.Fatalf("DeleteIf of the empty key: %v, want invalid", err)
		}
	})

	t.Run("ThroughAFollower", func(t *testing.T) {
		// A conditional write received by a follower is forwarded to the
		// leader; its conflict must come back typed, with the revision.
		f := cluster.client(cluster.follower())
		rev, err := f.Put(ctx, "forwarded", []byte("v1"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.DeleteIf(ctx, "forwarded", rev-1)
		if got := conflictRevision(t, err, "stale DeleteIf through a follower"); got != rev {
			t.Fatalf("conflict carries revision %d, want %d", got, rev)
		}
		mustGet(t, ctx, f, "forwarded", "v1", rev)
		if _, err := f.DeleteIf(ctx, "forwarded", rev); err != nil {
			t.Fatalf("DeleteIf through a follower: %v", err)
		}
		if _, err := f.Get(ctx, "forwarded"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get after DeleteIf: %v, want not found", err)
		}
	})

	t.Run("KeysThatNeedEscaping", func(t *testing.T) {
		for _, key := range []string{"a/b", "a b", "100%", "q?x=1", "h#frag", "../up", "ü/ключ", "a//b/", "%2F", ".", "..", "a/./b", "/lead", "-"} {
			rev, err := c.PutIf(ctx, key, []byte(key), 0)
			if err != nil {
				t.Fatalf("PutIf(%q): %v", key, err)
			}
			mustGet(t, ctx, c, key, key, rev)
			if _, err := c.DeleteIf(ctx, key, rev+1); !errors.Is(err, ErrConflict) {
				t.Fatalf("stale DeleteIf(%q): %v, want conflict", key, err)
			}
			if _, err := c.DeleteIf(ctx, key, rev); err != nil {
				t.Fatalf("DeleteIf(%q): %v", key, err)
			}
			if _, err := c.Get(ctx, key); !errors.Is(err, ErrNotFound) {
				t.Fatalf("get %q after DeleteIf: %v, want not found", key, err)
			}
		}
	})

	t.Run("RacingWritersOneWins", func(t *testing.T) {
		// Writers that all read the same revision race to replace or
		// delete the key: exactly one compare-and-swap succeeds.
		const writers = 8
		for round, del := range []bool{false, true} {
			key := fmt.Sprintf("race-%d", round)
			rev, err := c.Put(ctx, key, []byte("start"))
			if err != nil {
				t.Fatal(err)
			}
			errs := make([]error, writers)
			var wg sync.WaitGroup
			for i := range writers {
				wg.Go(func() {
					if del {
						_, errs[i] = c.DeleteIf(ctx, key, rev)
					} else {
						_, errs[i] = c.PutIf(ctx, key, fmt.Appendf(nil, "w%d", i), rev)
					}
				})
			}
			wg.Wait()
			winners := 0
			for i, err := range errs {
				switch {
				case err == nil:
					winners++
				case !errors.Is(err, ErrConflict):
					t.Fatalf("writer %d (delete %v): %v, want success or conflict", i, del, err)
				}
			}
			if winners != 1 {
				t.Fatalf("delete %v: %d writers won, want 1 (%v)", del, winners, errs)
			}
		}
	})
}

package client

import (
	"bytes"
	"errors"
	"testing"
)

// TestBatch runs Batch against a three-node cluster: every operation
// applies at one revision; a batch with one failing operation changes
// nothing and names its key; bad batches are refused before they are sent.
func TestBatch(t *testing.T) {
	cluster := startCluster(t, 3)
	c := cluster.client()
	ctx := testContext(t)

	old, err := c.Put(ctx, "batch/old", []byte("o"))
	if err != nil {
		t.Fatal(err)
	}
	rev, err := c.Batch(ctx,
		BatchPut("batch/a", []byte("1")),
		BatchPut("batch/bin", []byte{0, 0xff}).If(0),
		BatchDelete("batch/old").If(old),
	)
	if err != nil || rev <= old {
		t.Fatalf("batch: %d %v", rev, err)
	}
	mustGet(t, ctx, c, "batch/a", "1", rev)
	mustGet(t, ctx, c, "batch/bin", "\x00\xff", rev)
	if _, err := c.Get(ctx, "batch/old"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("batch/old after the batch's delete: %v", err)
	}

	_, err = c.Batch(ctx, BatchPut("batch/c", []byte("x")), BatchPut("batch/a", []byte("2")).If(old))
	var e *Error
	if !errors.Is(err, ErrConflict) || !errors.As(err, &e) || e.Key != "batch/a" || e.Revision != rev {
		t.Fatalf("conflicting batch: %v (%+v), want a conflict on batch/a at %d", err, e, rev)
	}
	_, err = c.Batch(ctx, BatchPut("batch/c", []byte("x")), BatchDelete("batch/none"))
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &e) || e.Key != "batch/none" {
		t.Fatalf("batch deleting a missing key: %v, want not found naming batch/none", err)
	}
	if _, err := c.Get(ctx, "batch/c"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a failed batch wrote batch/c: %v", err)
	}
	mustGet(t, ctx, c, "batch/a", "1", rev)

	// Values JSON would escape into six bytes a byte go in base64, or as
	// themselves: each batch is within the limits, and its body within the
	// server's bound (twice the batch's bytes and a little).
	control, markup := bytes.Repeat([]byte{1}, 600<<10), bytes.Repeat([]byte("<&>"), 100<<10)
	rev, err = c.Batch(ctx, BatchPut("batch/control", control), BatchPut("batch/markup", markup))
	if err != nil {
		t.Fatalf("a batch of %d control bytes and %d of markup: %v", len(control), len(markup), err)
	}
	mustGet(t, ctx, c, "batch/control", string(control), rev)
	mustGet(t, ctx, c, "batch/markup", string(markup), rev)

	for name, ops := range map[string][]BatchOp{
		"no ops":        nil,
		"empty key":     {BatchPut("", nil)},
		"zero op":       {{}},
		"duplicate key": {BatchPut("batch/d", nil), BatchDelete("batch/d")},
	} {
		if _, err := c.Batch(ctx, ops...); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

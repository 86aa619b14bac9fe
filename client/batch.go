package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"coord/api"
)

// BatchOp is one operation of a Batch: a put or a delete of a key, with
// an optional compare-and-swap on its revision. Make one with BatchPut or
// BatchDelete, and add a condition with If.
type BatchOp struct {
	op    string
	key   string
	value []byte
	prev  *uint64
}

// BatchPut is an operation that sets key to value.
func BatchPut(key string, value []byte) BatchOp {
	return BatchOp{op: api.BatchPut, key: key, value: value}
}

// BatchDelete is an operation that removes key; the batch fails with
// ErrNotFound if it does not exist.
func BatchDelete(key string) BatchOp { return BatchOp{op: api.BatchDelete, key: key} }

// If makes the operation apply only if the key's revision is prev (0: the
// key must not exist), as PutIf and DeleteIf do.
func (o BatchOp) If(prev uint64) BatchOp {
	o.prev = &prev
	return o
}

// Batch applies ops as one write: every operation at one revision, which
// it returns, or none of them. If an operation's condition does not hold
// (ErrConflict, with the key's current revision) or a delete finds no key
// (ErrNotFound), nothing changes, and the *Error's Key names the key of the
// operation that failed. A batch over the cluster's limits (by default
// 4,096 operations and 1 MiB of keys and values together), or with a key
// twice, is ErrInvalid.
func (c *Client) Batch(ctx context.Context, ops ...BatchOp) (uint64, error) {
	if len(ops) == 0 {
		return 0, fmt.Errorf("%w: empty batch", ErrInvalid)
	}
	req := api.BatchRequest{Ops: make([]api.BatchOp, len(ops))}
	for i, o := range ops {
		if o.op == "" || o.key == "" {
			return 0, fmt.Errorf("%w: batch op %d: empty key or an op not made by BatchPut or BatchDelete", ErrInvalid, i)
		}
		wire := api.BatchOp{Op: o.op, Key: o.key, PrevRevision: o.prev}
		if compactAsText(o.value) {
			wire.Value = string(o.value)
		} else {
			wire.ValueBase64 = base64.StdEncoding.EncodeToString(o.value)
		}
		req.Ops[i] = wire
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // '<', '>' and '&' as themselves, not in 6 bytes each
	if err := enc.Encode(req); err != nil {
		return 0, fmt.Errorf("client: batch: %w", err)
	}
	body := buf.Bytes()
	var out api.WriteResponse
	err := c.do(ctx, call{method: "POST", path: "/v1/batch", body: body, write: true, spreads: true}, &out)
	return out.Revision, err
}

// compactAsText reports whether value goes as JSON text in at most twice
// its bytes: valid UTF-8 with no control byte that JSON escapes as
// \u00XX (six bytes for one), but '\n', '\r' and '\t'. Otherwise it goes
// in base64 (4/3 of its bytes): the server bounds a batch's body at about
// twice the batch's bytes, and a value of control bytes sent as text would
// pass the batch's limits and still be refused as too large.
func compactAsText(value []byte) bool {
	for _, b := range value {
		if b < 0x20 && b != '\n' && b != '\r' && b != '\t' {
			return false
		}
	}
	return utf8.Valid(value)
}

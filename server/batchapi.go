package server

import (
	"encoding/base64"
	"fmt"
	"net/http"

	"coord/api"
)

// bodyBytesMax bounds the body of a request to route. A batch's body is
// JSON: its keys and values (up to Limits.BatchBytes, a value in base64
// taking 4/3 of its bytes, as text up to twice them: '"' and '\\' escaped;
// a client sends a value whose text escapes would take more in base64, as
// coord's does) and, per operation, the field names and punctuation around
// them. Every other route's body is at most a value and a little JSON.
func bodyBytesMax(route string, limits Limits) int64 {
	if route == "kv_batch" {
		return 2*int64(limits.BatchBytes) + 256*int64(limits.BatchOps) + 4096
	}
	return int64(limits.ValueBytes) + 4096
}

// batch serves POST /v1/batch: the operations of the body, checked against
// the limits (and, with tokens, each key against the token's prefix) before
// they are proposed as one OpBatch, so that a bad batch gets a clear 4xx
// and never reaches the log. tok is the request's token, as the guard
// resolved it (handleWithToken).
func (a *API) batch(w http.ResponseWriter, r *request, tok Token) error {
	ops, err := parseBatch(r.body)
	if err != nil {
		return err
	}
	if reason := checkBatch(a.cfg.Limits, ops); reason != "" {
		return fmt.Errorf("%w: %s", ErrInvalid, reason)
	}
	if err := a.checkBatchToken(tok, ops); err != nil {
		return err
	}
	return a.propose(w, r, Command{Op: OpBatch, Ops: ops}, func(res Result) error {
		return writeJSON(w, http.StatusOK, api.WriteResponse{Revision: res.Revision})
	})
}

// parseBatch decodes a batch's JSON body strictly: text that is not UTF-8
// (checkJSONText), unknown fields, trailing data, an unknown op, a value
// given twice or with a delete, and bad base64 are each refused, naming
// the operation.
func parseBatch(body []byte) ([]BatchOp, error) {
	var req api.BatchRequest
	if err := decodeStrict(body, "batch body", &req); err != nil {
		return nil, err
	}
	ops := make([]BatchOp, len(req.Ops))
	for i, o := range req.Ops {
		op, err := batchOp(o)
		if err != nil {
			return nil, fmt.Errorf("%w: batch op %d: %v", ErrInvalid, i, err)
		}
		ops[i] = op
	}
	return ops, nil
}

func batchOp(o api.BatchOp) (BatchOp, error) {
	op := BatchOp{Key: o.Key}
	switch o.Op {
	case api.BatchPut:
		op.Op = OpPut
	case api.BatchDelete:
		op.Op = OpDelete
	default:
		return op, fmt.Errorf("op %q: want %q or %q", o.Op, api.BatchPut, api.BatchDelete)
	}
	switch {
	case o.Value != "" && o.ValueBase64 != "":
		return op, fmt.Errorf("both value and value_base64")
	case op.Op == OpDelete && (o.Value != "" || o.ValueBase64 != ""):
		return op, fmt.Errorf("a delete with a value")
	case o.ValueBase64 != "":
		v, err := base64.StdEncoding.DecodeString(o.ValueBase64)
		if err != nil {
			return op, fmt.Errorf("value_base64: %v", err)
		}
		op.Value = v
	case o.Value != "":
		op.Value = []byte(o.Value)
	}
	if o.PrevRevision != nil {
		op.HasPrev, op.PrevRevision = true, *o.PrevRevision
	}
	return op, nil
}

// checkBatchToken refuses a batch with a key outside the prefix of its
// token, tok (403, naming the key). The guard checked the token's role, as
// the route's table entry asks, and resolved it, but a batch's keys are in
// its body.
func (a *API) checkBatchToken(tok Token, ops []BatchOp) error {
	if !a.cfg.Auth {
		return nil
	}
	if key, denied := batchDenial(tok, ops); denied {
		ae := fail(api.CodePermissionDenied, denial(tok, access{role: TokenWrite, scope: scopeKey}, key))
		ae.body.Key = key
		return ae
	}
	return nil
}

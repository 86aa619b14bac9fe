package server

import (
	"fmt"

	"coord/internal/assert"
	"coord/internal/wire"
)

// A batch (OpBatch) is several puts and deletes of keys applied as one
// command: one log entry, one revision (the entry's index) for every key it
// changes, and all of them or none. Each operation may carry its own
// compare-and-swap condition on the key's revision, as a single put or
// delete does; the batch applies only if every condition holds, every
// delete finds its key, and every operation is within the Limits. It is
// coord's counterpart of etcd's Txn with puts and deletes and no else
// branch, and of Consul's KV transaction, kept to what bulk loads and
// multi-key compare-and-swaps need.
//
// A key appears at most once in a batch: the revision a batch writes is
// one per key, and two writes of one key at one revision would leave its
// Version ambiguous. etcd refuses duplicate keys in a Txn for the same
// reason.

// BatchOp is one operation of a batch: OpPut or OpDelete of Key, on
// condition that the key's revision is PrevRevision if HasPrev (0: the key
// must not exist).
type BatchOp struct {
	Op           Op
	Key          string
	Value        []byte
	HasPrev      bool
	PrevRevision uint64
}

// batchOpOverheadBytes bounds what an op of a batch takes in its encoding
// besides its key and value: the op byte, two lengths, the condition flag
// and a revision, each length and the revision a uvarint of at most 10
// bytes.
const batchOpOverheadBytes = 1 + 10 + 10 + 1 + 10

// batchOpMinBytes is the least an op of a batch takes in its encoding: the
// op byte, two lengths of one byte (empty key and value), the condition
// flag and a one-byte revision.
const batchOpMinBytes = 5

// marshalBatchOps encodes ops as OpBatch's Value: a count, then per
// operation its op byte, key, value, condition flag and revision.
func marshalBatchOps(ops []BatchOp) []byte {
	size := 8
	for _, op := range ops {
		size += 24 + len(op.Key) + len(op.Value)
	}
	e := wire.Encoder{Buf: make([]byte, 0, size)}
	e.Uvarint(uint64(len(ops)))
	for _, op := range ops {
		e.Byte(byte(op.Op))
		e.String(op.Key)
		e.Bytes(op.Value)
		e.Bool(op.HasPrev)
		e.Uvarint(op.PrevRevision)
	}
	return e.Buf
}

// unmarshalBatchOps decodes what marshalBatchOps encoded; errors wrap
// ErrMalformed. It checks only the encoding: the limits and the ops' kinds
// are checkBatch's, which every replica runs alike on the decoded ops.
func unmarshalBatchOps(data []byte) ([]BatchOp, error) {
	d := wire.NewDecoder(data, ErrMalformed)
	// Each op takes batchOpMinBytes at least: a count the input cannot
	// hold is refused before the ops are allocated (64 bytes each, where
	// a bound of one byte each let a corrupt entry ask for 64 times its
	// size).
	ops := make([]BatchOp, d.Count("batch op count", len(data)/batchOpMinBytes))
	for i := range ops {
		ops[i] = BatchOp{
			Op:           Op(d.Byte("batch op")),
			Key:          d.String("batch key", maxEncodedField),
			Value:        d.Bytes("batch value", maxEncodedField),
			HasPrev:      d.Bool("batch has prev"),
			PrevRevision: d.Uvarint("batch prev revision"),
		}
	}
	if err := d.Done(); err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	return ops, nil
}

// checkBatch returns why ops break the limits or are not a batch, or "".
// The API runs it before proposing, so that a bad batch is refused with a
// clear error before it reaches the log; Apply runs it again, since bytes
// from the log are input.
func checkBatch(limits Limits, ops []BatchOp) string {
	switch {
	case len(ops) == 0:
		return "empty batch"
	case len(ops) > limits.BatchOps:
		return fmt.Sprintf("batch of %d operations over the limit of %d", len(ops), limits.BatchOps)
	}
	total := 0
	seen := make(map[string]int, len(ops))
	for i, op := range ops {
		switch {
		case op.Op != OpPut && op.Op != OpDelete:
			return fmt.Sprintf("batch op %d: %s is not put or delete", i, op.Op)
		case op.Key == "":
			return fmt.Sprintf("batch op %d: empty key", i)
		case len(op.Key) > limits.KeyBytes:
			return fmt.Sprintf("batch op %d: key of %d bytes over the limit of %d", i, len(op.Key), limits.KeyBytes)
		case len(op.Value) > limits.ValueBytes:
			return fmt.Sprintf("batch op %d: value of %d bytes over the limit of %d", i, len(op.Value), limits.ValueBytes)
		case op.Op == OpDelete && len(op.Value) != 0:
			return fmt.Sprintf("batch op %d: a delete with a value", i)
		}
		if j, dup := seen[op.Key]; dup {
			return fmt.Sprintf("batch ops %d and %d: key %q twice", j, i, op.Key)
		}
		seen[op.Key] = i
		total += len(op.Key) + len(op.Value)
	}
	if total > limits.BatchBytes {
		return fmt.Sprintf("batch of %d bytes of keys and values over the limit of %d", total, limits.BatchBytes)
	}
	return ""
}

// batch applies c.Ops at index, all or none: it checks every limit and
// every condition before it changes anything.
func (m *Machine) batch(index uint64, c Command) Result {
	if reason := checkBatch(m.limits, c.Ops); reason != "" {
		return Result{Status: StatusInvalid, Reason: reason}
	}
	for i, op := range c.Ops {
		cur := m.revision(op.Key)
		if op.HasPrev && cur != op.PrevRevision {
			return Result{Status: StatusConflict, Revision: cur, Key: op.Key,
				Reason: fmt.Sprintf("batch op %d: key %q at revision %d, not %d", i, op.Key, cur, op.PrevRevision)}
		}
		if op.Op == OpDelete && cur == 0 {
			return Result{Status: StatusNotFound, Key: op.Key, Reason: fmt.Sprintf("batch op %d: key %q not found", i, op.Key)}
		}
	}
	for _, op := range c.Ops {
		one := Command{Op: op.Op, Key: op.Key, Value: op.Value}
		var res Result
		if op.Op == OpPut {
			res = m.put(index, one)
		} else {
			res = m.delete(index, one)
		}
		// The checks above are every way put and delete can fail.
		assert.That(res.Status == StatusOK, "server: batch op on %q failed after its checks: %+v", op.Key, res)
	}
	return Result{Revision: index}
}

// batchDenial returns the first key of ops that t may not write, and
// whether there is one.
func batchDenial(t Token, ops []BatchOp) (string, bool) {
	for _, op := range ops {
		if !t.allows(TokenWrite, scopeKey, op.Key) {
			return op.Key, true
		}
	}
	return "", false
}

// wakeBatch wakes the watches of every key a batch that took effect
// changed: each of them changed at the batch's revision.
func wakeBatch(x *watchIndex, cmd Command, res Result) {
	if cmd.Op != OpBatch || res.Status != StatusOK {
		return
	}
	for _, op := range cmd.Ops {
		x.changed(Watched{Name: op.Key})
	}
}

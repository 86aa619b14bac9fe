package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"coord/internal/wire"
)

func batchPut(key, value string) BatchOp { return BatchOp{Op: OpPut, Key: key, Value: []byte(value)} }

func TestBatchAppliesEveryOpAtOneRevision(t *testing.T) {
	a := newApplier(t)
	a.want(Command{Op: OpPut, Key: "old", Value: []byte("o")}, StatusOK)
	r1 := a.want(Command{Op: OpPut, Key: "cas", Value: []byte("1")}, StatusOK)
	res := a.want(Command{Op: OpBatch, Ops: []BatchOp{
		batchPut("a", "1"),
		batchPut("b", "2"),
		{Op: OpDelete, Key: "old"},
		{Op: OpPut, Key: "cas", Value: []byte("2"), HasPrev: true, PrevRevision: r1.Revision},
		{Op: OpPut, Key: "new", Value: []byte("n"), HasPrev: true, PrevRevision: 0},
	}}, StatusOK)
	if res.Revision != a.index {
		t.Fatalf("batch revision %d, want its index %d", res.Revision, a.index)
	}
	for key, want := range map[string]KeyValue{
		"a":   {Key: "a", Value: []byte("1"), CreateRevision: a.index, Revision: a.index, Version: 1},
		"b":   {Key: "b", Value: []byte("2"), CreateRevision: a.index, Revision: a.index, Version: 1},
		"cas": {Key: "cas", Value: []byte("2"), CreateRevision: r1.Revision, Revision: a.index, Version: 2},
		"new": {Key: "new", Value: []byte("n"), CreateRevision: a.index, Revision: a.index, Version: 1},
	} {
		if got, _ := a.m.Get(key); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want %+v", key, got, want)
		}
	}
	if _, ok := a.m.Get("old"); ok {
		t.Error("the batch's delete left its key")
	}
}

// TestBatchThatFailsChangesNothing: a batch with one op that cannot apply
// (a condition that does not hold, a delete of a missing key, a limit
// broken, a key twice, a token's prefix) leaves the state as it was, and
// its result names the op's key where one is to blame.
func TestBatchThatFailsChangesNothing(t *testing.T) {
	limits := DefaultLimits()
	limits.BatchOps, limits.BatchBytes = 4, 64
	prefixed := Token{Role: TokenWrite, KeyPrefix: "app/", Hash: HashToken("batch-test-secret")}
	for _, tc := range []struct {
		name    string
		ops     []BatchOp
		auth    bool
		status  Status
		key     string
		reason  string
		revison uint64
	}{
		{"conflict", []BatchOp{batchPut("app/a", "1"), {Op: OpPut, Key: "app/x", Value: []byte("v"), HasPrev: true, PrevRevision: 99}}, false, StatusConflict, "app/x", "not 99", 2},
		{"must not exist", []BatchOp{batchPut("app/a", "1"), {Op: OpPut, Key: "app/x", HasPrev: true}}, false, StatusConflict, "app/x", "not 0", 2},
		{"delete missing", []BatchOp{batchPut("app/a", "1"), {Op: OpDelete, Key: "app/none"}}, false, StatusNotFound, "app/none", "not found", 0},
		{"duplicate key", []BatchOp{batchPut("app/a", "1"), batchPut("app/a", "2")}, false, StatusInvalid, "", "twice", 0},
		{"too many ops", []BatchOp{batchPut("app/a", ""), batchPut("app/b", ""), batchPut("app/c", ""), batchPut("app/d", ""), batchPut("app/e", "")}, false, StatusInvalid, "", "5 operations over the limit of 4", 0},
		{"too many bytes", []BatchOp{batchPut("app/a", strings.Repeat("v", 40)), batchPut("app/b", strings.Repeat("v", 40))}, false, StatusInvalid, "", "over the limit of 64", 0},
		{"empty", nil, false, StatusInvalid, "", "empty batch", 0},
		{"empty key", []BatchOp{batchPut("app/a", "1"), batchPut("", "1")}, false, StatusInvalid, "", "empty key", 0},
		{"not put or delete", []BatchOp{batchPut("app/a", "1"), {Op: OpAcquire, Key: "app/l"}}, false, StatusInvalid, "", "not put or delete", 0},
		{"delete with a value", []BatchOp{{Op: OpDelete, Key: "app/x", Value: []byte("v")}}, false, StatusInvalid, "", "a delete with a value", 0},
		{"outside the prefix", []BatchOp{batchPut("app/a", "1"), batchPut("other/b", "1")}, true, StatusForbidden, "other/b", "limited to key names", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &applier{t: t, m: NewMachine(limits)}
			a.want(TokenCreateCommand(prefixed), StatusOK)
			a.want(Command{Op: OpPut, Key: "app/x", Value: []byte("x")}, StatusOK)
			before := a.m.Snapshot()
			cmd := Command{Op: OpBatch, Ops: tc.ops}
			if tc.auth {
				cmd.HasAuth, cmd.AuthHash = true, prefixed.Hash
			}
			res := a.want(cmd, tc.status)
			if res.Key != tc.key || res.Holder != "" || !strings.Contains(res.Reason, tc.reason) || res.Revision != tc.revison {
				t.Errorf("result %+v: want key %q, revision %d, a reason with %q", res, tc.key, tc.revison, tc.reason)
			}
			// Only the applied index moved: every key is as it was.
			after := NewMachine(limits)
			if err := after.Restore(a.m.Snapshot()); err != nil {
				t.Fatal(err)
			}
			after.applied = a.index - 1
			if !bytes.Equal(after.Snapshot(), before) {
				t.Fatal("a failed batch changed the state")
			}
		})
	}
}

func TestBatchCommandRoundTripAndBadInput(t *testing.T) {
	c := Command{Op: OpBatch, Client: 3, Seq: 4, Ops: []BatchOp{
		batchPut("a", "1"), {Op: OpDelete, Key: "b", HasPrev: true, PrevRevision: 7}, {Op: OpPut, Key: "c", Value: []byte{0, 0xff}},
	}}
	got, err := UnmarshalCommand(c.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: got %+v, want %+v", got, c)
	}
	ops := marshalBatchOps(c.Ops)
	for name, value := range map[string][]byte{
		"no count":      nil,
		"count too big": {0xff, 0xff, 0x03},
		"truncated":     ops[:len(ops)-1],
		"trailing":      append(append([]byte{}, ops...), 0),
		"bad bool":      append(marshalBatchOps([]BatchOp{batchPut("a", "")})[:5:5], 2, 0),
	} {
		data := Command{Op: OpPut, Key: "", Value: value}.Marshal()
		data[1] = byte(OpBatch) // the op byte: the value is now the batch's ops
		if _, err := UnmarshalCommand(data); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
		// Apply refuses it alike on every replica.
		m := NewMachine(DefaultLimits())
		if res := m.Apply(1, data); res.Status != StatusInvalid {
			t.Errorf("%s: applied as %+v", name, res)
		}
	}
}

// TestBatchKeysSurviveSnapshotAndRestore: batched keys are in the
// snapshot, with their shared revision, and a restored machine goes on
// applying batches as the original does.
func TestBatchKeysSurviveSnapshotAndRestore(t *testing.T) {
	a := newApplier(t)
	var ops []BatchOp
	for i := range 300 {
		ops = append(ops, batchPut(fmt.Sprintf("bulk/%04d", i), fmt.Sprint(i)))
	}
	res := a.want(Command{Op: OpBatch, Ops: ops}, StatusOK)
	snap := a.m.Snapshot()
	restored := NewMachine(DefaultLimits())
	if err := restored.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if k, _, _ := restored.Len(); k != 300 {
		t.Fatalf("restored %d keys, want 300", k)
	}
	kv, ok := restored.Get("bulk/0123")
	if !ok || string(kv.Value) != "123" || kv.Revision != res.Revision || kv.CreateRevision != res.Revision {
		t.Fatalf("restored key %+v", kv)
	}
	next := Command{Op: OpBatch, Ops: []BatchOp{{Op: OpDelete, Key: "bulk/0000", HasPrev: true, PrevRevision: res.Revision}, batchPut("bulk/0001", "x")}}
	a.want(next, StatusOK)
	r := restored.Apply(a.index, next.Marshal())
	if r.Status != StatusOK || !bytes.Equal(restored.Snapshot(), a.m.Snapshot()) {
		t.Fatalf("restored machine applied %+v and differs from the original", r)
	}
}

// TestBatchReplicatesOnACluster: a batch sent to a follower of a real
// 3-node cluster (over TCP on loopback) applies on every node at one
// revision and wakes each node's watches of its keys; a member that was
// down catches up by a snapshot that holds the batched keys.
func TestBatchReplicatesOnACluster(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	lagging := c.follower(leader)
	dir := lagging.dir
	laggingLast, _ := lagging.disk.LastIndex()
	c.crash(lagging.id)
	leader = c.waitLeader()
	via := c.follower(leader)
	var waits []<-chan struct{}
	for _, n := range c.nodes {
		for _, key := range []string{"batch/a", "batch/b"} {
			waits = append(waits, n.ChangedOf(Watched{Name: key}))
		}
	}
	body := `{"ops":[{"op":"put","key":"batch/a","value":"1"},{"op":"put","key":"batch/b","value":"2","prev_revision":0}]}`
	var rev uint64
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Post(via.httpURL+"/v1/batch", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			rev = uint64(out["revision"].(float64))
			break
		}
		// Only a cluster still settling may refuse it; the condition
		// prev_revision 0 makes a retry after an unknown outcome safe.
		if resp.StatusCode != 503 || time.Now().After(deadline) {
			t.Fatalf("batch through follower %d: %d %v", via.id, resp.StatusCode, out)
		}
	}
	for i, ch := range waits {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("watch channel %d not closed within 30s of the batch", i)
		}
	}
	same := func(v View) bool {
		a, _ := v.Get("batch/a")
		b, _ := v.Get("batch/b")
		return string(a.Value) == "1" && string(b.Value) == "2" && a.Revision == rev && b.Revision == rev
	}
	for _, n := range c.nodes {
		waitApplied(t, n, 30*time.Second, "batch not applied at one revision", same)
	}
	for i := range 120 { // past SnapshotEntries twice: the batch's entry leaves every log
		propose(t, c, Command{Op: OpPut, Key: fmt.Sprintf("fill%d", i%7), Value: []byte(fmt.Sprint(i))})
	}
	for _, n := range c.nodes {
		if first, _ := n.disk.FirstIndex(); first <= laggingLast+1 {
			t.Fatalf("node %d still holds index %d (first %d): no snapshot needed", n.id, laggingLast+1, first)
		}
	}
	back := c.restart(lagging.id, dir)
	waitApplied(t, back, 60*time.Second, "the member that was down did not get the batch", same)
}

// TestConfigRefusesBatchesOverAFrame: a batch within the limits must fit
// in one peer transport frame, or the leader's append of it would be
// dropped at every attempt.
func TestConfigRefusesBatchesOverAFrame(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.Peers, cfg.DataDir = 1, map[uint64]string{1: "127.0.0.1:1"}, t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Limits.BatchBytes = 16 << 20
	if err := cfg.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Limits.BatchBytes") {
		t.Fatalf("Validate with 16 MiB batches = %v, want ErrInvalid naming Limits.BatchBytes", err)
	}
	cfg.Limits.BatchBytes, cfg.Limits.BatchOps = 1<<20, 1<<20
	if err := cfg.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Limits.BatchOps") {
		t.Fatalf("Validate with a million ops a batch = %v, want ErrInvalid naming Limits.BatchOps", err)
	}
	// The encoding's overhead per op is within the bound assumed.
	op := BatchOp{Op: OpDelete, Key: "k", Value: []byte("v"), HasPrev: true, PrevRevision: ^uint64(0)}
	if got := len(marshalBatchOps([]BatchOp{op})) - 1 - len(op.Key) - len(op.Value); got > batchOpOverheadBytes {
		t.Fatalf("an op's encoding takes %d bytes besides its key and value, over %d", got, batchOpOverheadBytes)
	}
}

// TestFailedBatchKeepsItsKeyThroughASnapshot: a client's retry gets the
// result it was first given, from a restored snapshot too: a failed
// batch's Key, and a lease's Holder, each in its own field. The snapshot
// keeps them in the one field Holder alone had before Key existed, so
// that snapshots read alike by builds before and after it.
func TestFailedBatchKeepsItsKeyThroughASnapshot(t *testing.T) {
	a := newApplier(t)
	a.want(Command{Op: OpPut, Key: "x", Value: []byte("x")}, StatusOK)
	a.want(Command{Op: OpAcquire, Key: "L", Holder: "alice", TTL: time.Minute}, StatusOK)
	cmds := []Command{
		{Op: OpBatch, Client: 9, Seq: 1, Ops: []BatchOp{batchPut("a", "1"), {Op: OpPut, Key: "x", Value: []byte("v"), HasPrev: true, PrevRevision: 99}}},
		{Op: OpBatch, Client: 9, Seq: 2, Ops: []BatchOp{batchPut("a", "1"), {Op: OpDelete, Key: "none"}}},
		{Op: OpAcquire, Client: 9, Seq: 3, Key: "L", Holder: "bob", TTL: time.Minute},
	}
	want := []Result{
		a.want(cmds[0], StatusConflict),
		a.want(cmds[1], StatusNotFound),
		a.want(cmds[2], StatusHeld),
	}
	if want[0].Key != "x" || want[1].Key != "none" || want[2].Holder != "alice" || want[2].Key != "" {
		t.Fatalf("results %+v: want keys x and none, then holder alice", want)
	}
	restored := &applier{t: t, m: NewMachine(DefaultLimits()), index: a.index}
	if err := restored.m.Restore(a.m.Snapshot()); err != nil {
		t.Fatal(err)
	}
	for i, c := range cmds {
		if got := restored.do(c); got != want[i] {
			t.Errorf("retry of %v after a restore: %+v, want %+v as first answered", c.Op, got, want[i])
		}
	}

	// The field's bytes are the ones written before Key existed.
	for _, r := range []Result{want[0], want[2]} {
		var got, old wire.Encoder
		r.encode(&got)
		old.Byte(byte(r.Status))
		old.Uvarint(r.Revision)
		old.String(r.Holder + r.Key)
		old.Uvarint(r.Token)
		old.Varint(int64(r.TTL))
		old.String(r.Reason)
		if !bytes.Equal(got.Buf, old.Buf) {
			t.Errorf("%+v encoded as %x, want %x as before Result.Key", r, got.Buf, old.Buf)
		}
	}
}

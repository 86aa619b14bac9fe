package server

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// applier applies commands at growing indexes, as a log would.
type applier struct {
	t     *testing.T
	m     *Machine
	index uint64
}

func newApplier(t *testing.T) *applier {
	return &applier{t: t, m: NewMachine(DefaultLimits())}
}

func (a *applier) do(c Command) Result {
	a.index++
	// Through the codec, as the log carries it.
	return a.m.Apply(a.index, c.Marshal())
}

func (a *applier) want(c Command, status Status) Result {
	a.t.Helper()
	r := a.do(c)
	if r.Status != status {
		a.t.Fatalf("%v %q: status %v (%s), want %v", c.Op, c.Key, r.Status, r.Reason, status)
	}
	return r
}

func TestCommandRoundTrip(t *testing.T) {
	c := Command{Op: OpRenew, Client: 7, Seq: 9, Ack: 8, Key: "k", Value: []byte("v"),
		HasPrev: true, PrevRevision: 3, Holder: "h", Token: 5, TTL: 1500 * time.Millisecond, Renewed: 4}
	got, err := UnmarshalCommand(c.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: got %+v, want %+v", got, c)
	}
}

func TestUnmarshalCommandRejectsBadInput(t *testing.T) {
	good := Command{Op: OpPut, Key: "k", Value: []byte("v")}.Marshal()
	for name, data := range map[string][]byte{
		"empty":       nil,
		"version":     append([]byte{9}, good[1:]...),
		"unknown op":  append([]byte{commandVersion, 99}, good[2:]...),
		"truncated":   good[:len(good)-1],
		"trailing":    append(append([]byte{}, good...), 0),
		"huge length": {commandVersion, byte(OpPut), 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
	} {
		if _, err := UnmarshalCommand(data); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
}

func TestPutGetDeleteWithRevisions(t *testing.T) {
	a := newApplier(t)
	r1 := a.want(Command{Op: OpPut, Key: "x", Value: []byte("1")}, StatusOK)
	r2 := a.want(Command{Op: OpPut, Key: "x", Value: []byte("2")}, StatusOK)
	if r2.Revision <= r1.Revision {
		t.Fatalf("revisions do not grow: %d then %d", r1.Revision, r2.Revision)
	}
	kv, ok := a.m.Get("x")
	if !ok || string(kv.Value) != "2" || kv.Revision != r2.Revision || kv.CreateRevision != r1.Revision || kv.Version != 2 {
		t.Fatalf("get: %+v %v", kv, ok)
	}
	a.want(Command{Op: OpDelete, Key: "x"}, StatusOK)
	if _, ok := a.m.Get("x"); ok {
		t.Fatal("deleted key still there")
	}
	a.want(Command{Op: OpDelete, Key: "x"}, StatusNotFound)
}

func TestCompareAndSwap(t *testing.T) {
	a := newApplier(t)
	r := a.want(Command{Op: OpPut, Key: "x", Value: []byte("a"), HasPrev: true, PrevRevision: 0}, StatusOK)
	// 0 means "must not exist": a second create fails and says the current revision.
	c := a.want(Command{Op: OpPut, Key: "x", Value: []byte("b"), HasPrev: true, PrevRevision: 0}, StatusConflict)
	if c.Revision != r.Revision {
		t.Fatalf("conflict revision %d, want %d", c.Revision, r.Revision)
	}
	a.want(Command{Op: OpPut, Key: "x", Value: []byte("b"), HasPrev: true, PrevRevision: r.Revision + 1}, StatusConflict)
	r2 := a.want(Command{Op: OpPut, Key: "x", Value: []byte("b"), HasPrev: true, PrevRevision: r.Revision}, StatusOK)
	a.want(Command{Op: OpDelete, Key: "x", HasPrev: true, PrevRevision: r.Revision}, StatusConflict)
	a.want(Command{Op: OpDelete, Key: "x", HasPrev: true, PrevRevision: r2.Revision}, StatusOK)
	if kv, _ := a.m.Get("x"); kv.Revision != 0 {
		t.Fatalf("after delete: %+v", kv)
	}
}

func TestLeaseLifecycleAndFencingTokens(t *testing.T) {
	a := newApplier(t)
	ttl := time.Second
	r := a.want(Command{Op: OpAcquire, Key: "L", Holder: "a", TTL: ttl}, StatusOK)
	tokenA := r.Token
	held := a.want(Command{Op: OpAcquire, Key: "L", Holder: "b", TTL: ttl}, StatusHeld)
	if held.Holder != "a" || held.Token != tokenA {
		t.Fatalf("held result %+v", held)
	}
	// The holder itself cannot acquire again under a new token.
	a.want(Command{Op: OpAcquire, Key: "L", Holder: "a", TTL: ttl}, StatusHeld)
	a.want(Command{Op: OpRenew, Key: "L", Holder: "a", Token: tokenA, TTL: 2 * ttl}, StatusOK)
	if l := a.m.Lease("L"); l.TTL != 2*ttl {
		t.Fatalf("renew did not set TTL: %+v", l)
	}
	a.want(Command{Op: OpRenew, Key: "L", Holder: "b", Token: tokenA}, StatusLost)
	a.want(Command{Op: OpRelease, Key: "L", Holder: "a", Token: tokenA + 1}, StatusLost)
	a.want(Command{Op: OpRelease, Key: "L", Holder: "a", Token: tokenA}, StatusOK)
	if l := a.m.Lease("L"); l.Held() || l.Token != tokenA {
		t.Fatalf("after release: %+v", l)
	}
	rb := a.want(Command{Op: OpAcquire, Key: "L", Holder: "b", TTL: ttl}, StatusOK)
	if rb.Token <= tokenA {
		t.Fatalf("token did not grow: %d after %d", rb.Token, tokenA)
	}
	a.want(Command{Op: OpRenew, Key: "L", Holder: "a", Token: tokenA}, StatusLost)
}

func TestExpireOnlyTheTenureAndRenewalSeen(t *testing.T) {
	a := newApplier(t)
	r := a.want(Command{Op: OpAcquire, Key: "L", Holder: "a", TTL: time.Second}, StatusOK)
	seen := a.m.Lease("L").Renewed
	// A renewal lands after the leader decided to expire, before the Expire
	// entry: the lease must survive.
	a.want(Command{Op: OpRenew, Key: "L", Holder: "a", Token: r.Token}, StatusOK)
	a.want(Command{Op: OpExpire, Key: "L", Token: r.Token, Renewed: seen}, StatusLost)
	if !a.m.Lease("L").Held() {
		t.Fatal("stale Expire freed a renewed lease")
	}
	l := a.m.Lease("L")
	a.want(Command{Op: OpExpire, Key: "L", Token: l.Token, Renewed: l.Renewed}, StatusOK)
	if a.m.Lease("L").Held() {
		t.Fatal("Expire did not free the lease")
	}
	a.want(Command{Op: OpRenew, Key: "L", Holder: "a", Token: r.Token}, StatusLost)
}

func TestInvalidCommandsChangeNothing(t *testing.T) {
	a := newApplier(t)
	lim := DefaultLimits()
	for _, c := range []Command{
		{Op: OpPut, Key: ""},
		{Op: OpPut, Key: string(make([]byte, lim.KeyBytes+1))},
		{Op: OpPut, Key: "k", Value: make([]byte, lim.ValueBytes+1)},
		{Op: OpAcquire, Key: "L", Holder: "", TTL: time.Second},
		{Op: OpAcquire, Key: "L", Holder: "a", TTL: 0},
		{Op: OpAcquire, Key: "L", Holder: "a", TTL: lim.TTLMax + 1},
	} {
		a.want(c, StatusInvalid)
	}
	if r := a.m.Apply(a.index+1, []byte{1, 2, 3}); r.Status != StatusInvalid {
		t.Fatalf("garbage entry: %+v", r)
	}
	if k, l, s := a.m.Len(); k != 0 || l != 0 || s != 0 {
		t.Fatalf("state changed: %d keys %d leases %d sessions", k, l, s)
	}
}

func TestSessionsMakeRetriesExactlyOnce(t *testing.T) {
	a := newApplier(t)
	put := Command{Op: OpPut, Client: 42, Seq: 1, Key: "n", Value: []byte("1")}
	first := a.want(put, StatusOK)
	// A retry of the same sequence number, even after other writes, gets
	// the same answer and changes nothing.
	a.want(Command{Op: OpPut, Key: "other", Value: []byte("x")}, StatusOK)
	again := a.want(put, StatusOK)
	if again != first {
		t.Fatalf("retry answered %+v, first %+v", again, first)
	}
	if kv, _ := a.m.Get("n"); kv.Version != 1 {
		t.Fatalf("retried put applied twice: version %d", kv.Version)
	}
	// A CAS that failed stays failed on retry, even though it would now
	// succeed: the retry is the same request.
	cas := Command{Op: OpPut, Client: 42, Seq: 2, Ack: 1, Key: "n", Value: []byte("2"), HasPrev: true, PrevRevision: 999}
	a.want(cas, StatusConflict)
	a.want(cas, StatusConflict)
	// Once acknowledged, an old sequence number is refused, never reapplied.
	a.want(Command{Op: OpPut, Client: 42, Seq: 3, Ack: 2, Key: "n", Value: []byte("3")}, StatusOK)
	a.want(put, StatusStaleSequence)
	if kv, _ := a.m.Get("n"); string(kv.Value) != "3" {
		t.Fatalf("value %q, want 3", kv.Value)
	}
	// A client that has acknowledged results from a session the machine
	// does not know is refused.
	a.want(Command{Op: OpPut, Client: 43, Seq: 5, Ack: 4, Key: "n"}, StatusStaleSequence)
}

func TestSessionLimits(t *testing.T) {
	lim := DefaultLimits()
	lim.Sessions, lim.PendingPerSession = 2, 2
	a := &applier{t: t, m: NewMachine(lim)}
	a.want(Command{Op: OpPut, Client: 1, Seq: 1, Key: "k"}, StatusOK)
	a.want(Command{Op: OpPut, Client: 1, Seq: 2, Key: "k"}, StatusOK)
	a.want(Command{Op: OpPut, Client: 1, Seq: 3, Key: "k"}, StatusInvalid)
	a.want(Command{Op: OpPut, Client: 2, Seq: 1, Key: "k"}, StatusOK)
	a.want(Command{Op: OpPut, Client: 3, Seq: 1, Key: "k"}, StatusOK)
	if _, _, s := a.m.Len(); s != 2 {
		t.Fatalf("%d sessions, want 2", s)
	}
	// Client 1 was least recently used, so it went.
	if _, ok := a.m.sessions[1]; ok {
		t.Fatal("least recently used session not evicted")
	}
}

// randomCommands returns a workload touching few keys and leases, so that
// conflicts, retries and lease races are common.
func randomCommands(rng *rand.Rand, n int) []Command {
	keys := []string{"a", "b", "c"}
	holders := []string{"h1", "h2"}
	var cmds []Command
	for i := range n {
		c := Command{Op: Op(1 + rng.IntN(int(OpExpire))), Key: keys[rng.IntN(len(keys))]}
		c.Value = []byte{byte(i)}
		c.HasPrev = rng.IntN(3) == 0
		c.PrevRevision = uint64(rng.IntN(i + 1))
		c.Holder = holders[rng.IntN(len(holders))]
		c.Token = uint64(rng.IntN(i + 1))
		c.Renewed = uint64(rng.IntN(i + 1))
		c.TTL = time.Duration(1+rng.IntN(5)) * time.Second
		switch rng.IntN(20) { // now and then, a token command
		case 0:
			c = TokenCreateCommand(Token{Hash: HashToken(fmt.Sprint(rng.IntN(5))), Role: TokenRole(1 + rng.IntN(3))})
		case 1:
			c = TokenRevokeCommand(uint64(rng.IntN(i + 1)))
		case 2:
			c = TokenBootstrapCommand(Token{Hash: HashToken("boot"), Role: TokenAdmin})
		case 3, 4: // a batch over the same keys, which may fail as a whole
			c = Command{Op: OpBatch}
			for j, key := range keys[:1+rng.IntN(len(keys))] {
				op := BatchOp{Op: OpPut, Key: key, Value: []byte{byte(i), byte(j)}}
				if rng.IntN(4) == 0 {
					op = BatchOp{Op: OpDelete, Key: key}
				}
				op.HasPrev = rng.IntN(3) == 0
				op.PrevRevision = uint64(rng.IntN(i + 1))
				c.Ops = append(c.Ops, op)
			}
		}
		if rng.IntN(2) == 0 {
			c.Client = uint64(1 + rng.IntN(3))
			c.Seq = uint64(1 + rng.IntN(i+1))
			c.Ack = uint64(rng.IntN(int(c.Seq)))
		}
		cmds = append(cmds, c)
	}
	return cmds
}

func TestSnapshotRestoreIsExactAndDeterministic(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		cmds := randomCommands(rng, 200)
		a, b := newApplier(t), newApplier(t)
		cut := rng.IntN(len(cmds))
		for i, c := range cmds[:cut] {
			a.do(c)
			b.do(c)
			if i%17 == 0 {
				for _, p := range []Command{
					PeerSetCommand(uint64(i%5+1), fmt.Sprintf("10.0.0.%d:7000", i)),
					PeerForgetCommand(uint64(i%3 + 1)),
				} {
					a.do(p)
					b.do(p)
				}
			}
		}
		// b restarts from a's snapshot, then both apply the rest.
		restored := NewMachine(DefaultLimits())
		if err := restored.Restore(a.m.Snapshot()); err != nil {
			t.Fatalf("seed %d: restore: %v", seed, err)
		}
		b.m = restored
		for _, c := range cmds[cut:] {
			ra, rb := a.do(c), b.do(c)
			if ra != rb {
				t.Fatalf("seed %d: results diverge after restore: %+v vs %+v", seed, ra, rb)
			}
		}
		if !bytes.Equal(a.m.Snapshot(), b.m.Snapshot()) {
			t.Fatalf("seed %d: snapshots differ after the same commands", seed)
		}
	}
}

func TestRestoreRejectsCorruptSnapshots(t *testing.T) {
	a := newApplier(t)
	for _, c := range randomCommands(rand.New(rand.NewPCG(1, 1)), 50) {
		a.do(c)
	}
	snap := a.m.Snapshot()
	before := a.m.Snapshot()
	for name, data := range map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("xxxxxxxx"), snap[8:]...),
		"flipped":   flip(snap, len(snap)/2),
		"truncated": snap[:len(snap)-5],
	} {
		if err := a.m.Restore(data); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
	if !bytes.Equal(a.m.Snapshot(), before) {
		t.Fatal("a failed restore changed the machine")
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x40
	return c
}

func FuzzUnmarshalCommand(f *testing.F) {
	for _, c := range randomCommands(rand.New(rand.NewPCG(2, 2)), 10) {
		f.Add(c.Marshal())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := UnmarshalCommand(data)
		if err != nil {
			return
		}
		// What decodes re-encodes to something that decodes the same.
		again, err := UnmarshalCommand(c.Marshal())
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("re-decode: %+v vs %+v (%v)", again, c, err)
		}
	})
}

// FuzzRestore feeds arbitrary bytes to Restore: it must never panic, and
// a state it accepts must survive another snapshot and restore unchanged.
func FuzzRestore(f *testing.F) {
	a := &applier{m: NewMachine(DefaultLimits())}
	for _, c := range randomCommands(rand.New(rand.NewPCG(3, 3)), 40) {
		a.do(c)
	}
	f.Add(a.m.Snapshot())
	f.Add(NewMachine(DefaultLimits()).Snapshot())
	f.Fuzz(func(t *testing.T, data []byte) {
		m := NewMachine(DefaultLimits())
		if m.Restore(data) != nil {
			return
		}
		again := NewMachine(DefaultLimits())
		if err := again.Restore(m.Snapshot()); err != nil || !bytes.Equal(again.Snapshot(), m.Snapshot()) {
			t.Fatalf("a restored state does not survive another round trip: %v", err)
		}
	})
}

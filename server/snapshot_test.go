package server

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
	"time"
)

// TestSnapshotViewIsThePointInTime takes a view, writes it out on another
// goroutine while the machine applies a hundred more commands (keys
// overwritten and deleted, leases changed, sessions added), and checks
// that the bytes are exactly those of a machine that stopped at the
// view's index. Run it with -race: the view and the machine share their
// trees copy-on-write.
func TestSnapshotViewIsThePointInTime(t *testing.T) {
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 7))
		cmds := randomCommands(rng, 400)
		// Many keys, so that the trees have inner nodes to share.
		for i := range 2000 {
			cmds = append(cmds, Command{Op: OpPut, Key: fmt.Sprintf("k%05d", rng.IntN(3000)), Value: []byte(fmt.Sprint(i))})
		}
		rng.Shuffle(len(cmds), func(i, j int) { cmds[i], cmds[j] = cmds[j], cmds[i] })
		cut := len(cmds) / 2
		live, stopped := newApplier(t), newApplier(t)
		for _, c := range cmds[:cut] {
			live.do(c)
			stopped.do(c)
		}
		view := live.m.SnapshotView()
		if view.Index() != stopped.m.Applied() {
			t.Fatalf("seed %d: view at %d, want %d", seed, view.Index(), stopped.m.Applied())
		}
		written := make(chan []byte)
		go func() {
			var b bytes.Buffer
			if _, err := view.WriteTo(iotest.TruncateWriter(&b, 1<<62)); err != nil {
				t.Error(err)
			}
			written <- b.Bytes()
		}()
		for _, c := range cmds[cut:] {
			live.do(c)
			if c.Op == OpPut && rng.IntN(4) == 0 {
				live.do(Command{Op: OpDelete, Key: c.Key})
			}
		}
		got := <-written
		if want := stopped.m.Snapshot(); !bytes.Equal(got, want) {
			t.Fatalf("seed %d: the view wrote %d bytes that differ from the state at index %d (%d bytes)",
				seed, len(got), view.Index(), len(want))
		}
		// And the live machine went on to its own state, untouched by the view.
		again := NewMachine(DefaultLimits())
		if err := again.Restore(live.m.Snapshot()); err != nil || !bytes.Equal(again.Snapshot(), live.m.Snapshot()) {
			t.Fatalf("seed %d: the live machine's state does not round-trip after the view: %v", seed, err)
		}
	}
}

// TestRestoreFromStreamsAndRefusesBadInput restores from a reader handing
// over one byte at a time, and refuses a stream that is short, longer than
// it says, damaged, or failing, leaving the machine as it was.
func TestRestoreFromStreamsAndRefusesBadInput(t *testing.T) {
	a := newApplier(t)
	for _, c := range randomCommands(rand.New(rand.NewPCG(4, 4)), 300) {
		a.do(c)
	}
	snap := a.m.Snapshot()
	m := NewMachine(DefaultLimits())
	if err := m.RestoreFrom(iotest.OneByteReader(bytes.NewReader(snap)), int64(len(snap))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Snapshot(), snap) {
		t.Fatal("a streamed restore differs from the snapshot")
	}
	before := m.Snapshot()
	for name, tc := range map[string]struct {
		r    io.Reader
		size int64
		want error
	}{
		"size too small": {bytes.NewReader(snap), int64(len(snap)) - 1, ErrMalformed},
		"size too large": {bytes.NewReader(snap), int64(len(snap)) + 1, ErrMalformed},
		"short stream":   {bytes.NewReader(snap[:len(snap)/2]), int64(len(snap)), ErrMalformed},
		"flipped":        {bytes.NewReader(flip(snap, len(snap)/3)), int64(len(snap)), ErrMalformed},
		"bad checksum":   {bytes.NewReader(flip(snap, len(snap)-1)), int64(len(snap)), ErrMalformed},
		"read error":     {io.MultiReader(bytes.NewReader(snap[:100]), iotest.ErrReader(io.ErrClosedPipe)), int64(len(snap)), io.ErrClosedPipe},
	} {
		if err := m.RestoreFrom(tc.r, tc.size); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
		if !bytes.Equal(m.Snapshot(), before) {
			t.Fatalf("%s: a failed restore changed the machine", name)
		}
	}
}

// TestSnapshotFormatUnchanged pins the bytes of a small state as the
// machine wrote them before it moved from maps to B-trees and streamed
// encoding (generated then): snapshots written by either build restore on
// the other.
func TestSnapshotFormatUnchanged(t *testing.T) {
	a := newApplier(t)
	a.want(Command{Op: OpPut, Key: "b", Value: []byte("2")}, StatusOK)
	a.want(Command{Op: OpPut, Key: "a", Value: []byte("1"), Client: 9, Seq: 1}, StatusOK)
	a.want(Command{Op: OpAcquire, Key: "L", Holder: "h", TTL: 3e9}, StatusOK)
	a.want(Command{Op: OpRenew, Key: "M", Holder: "h", Token: 1}, StatusLost)
	a.m.peers[2] = "127.0.0.1:7002" // as OpPeerSet (or, before it, a membership change) records it
	a.want(TokenCreateCommand(Token{Hash: HashToken("s"), Role: TokenAdmin, Name: "n"}), StatusOK)
	const want = "636f6f7264736d320502016101310202010162013201010102014c01680380f882ad160303014d000000000001090002010100020000" +
		"000001020e3132372e302e302e313a3730303201010520043a718774c572bd8a25adbeb1bfcd5c0256ae11cecf9f9c3f925d0e52beaf8903" +
		"0000016ef8cef249"
	if got := fmt.Sprintf("%x", a.m.Snapshot()); got != want {
		t.Fatalf("snapshot bytes changed:\n got %s\nwant %s", got, want)
	}
	m := NewMachine(DefaultLimits())
	data, _ := hex.DecodeString(want)
	if err := m.Restore(data); err != nil || !bytes.Equal(m.Snapshot(), data) {
		t.Fatalf("the old bytes do not restore to the same state: %v", err)
	}
}

// TestSnapshotSizeHintCoversTheSnapshot checks that the size hint, which
// sizes the snapshot's buffer once, is at least what is written, and not
// far more, as keys are written, overwritten and deleted, and after a
// restore.
func TestSnapshotSizeHintCoversTheSnapshot(t *testing.T) {
	a := newApplier(t)
	rng := rand.New(rand.NewPCG(5, 5))
	for i := range 5000 {
		key := fmt.Sprintf("key/%d", rng.IntN(2000))
		if rng.IntN(5) == 0 {
			a.do(Command{Op: OpDelete, Key: key})
		} else {
			a.do(Command{Op: OpPut, Key: key, Value: make([]byte, rng.IntN(600))})
		}
		if i%500 == 0 {
			a.do(Command{Op: OpAcquire, Key: key, Holder: "h", TTL: time.Second, Client: 1, Seq: uint64(i + 1)})
		}
	}
	check := func(m *Machine, when string) {
		v := m.SnapshotView()
		n, err := v.WriteTo(io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if hint := v.SizeHint(); hint < n || hint > 2*n+8192 {
			t.Fatalf("%s: size hint %d for a snapshot of %d bytes", when, hint, n)
		}
	}
	check(a.m, "after the writes")
	m := NewMachine(DefaultLimits())
	if err := m.Restore(a.m.Snapshot()); err != nil {
		t.Fatal(err)
	}
	check(m, "after a restore")
}

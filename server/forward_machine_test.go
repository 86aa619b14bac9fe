package server

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// A forwarded write's fields (origin, request, token hash) round-trip in
// version 2; a command without them stays version 1, byte for byte.
func TestForwardedCommandRoundTrip(t *testing.T) {
	plain := Command{Op: OpPut, Client: 7, Seq: 9, Key: "k", Value: []byte("v")}
	if b := plain.Marshal(); b[0] != commandVersion {
		t.Fatalf("a command without forwarding fields encodes as version %d, want %d", b[0], commandVersion)
	}
	for _, c := range []Command{
		{Op: OpPut, Key: "k", Value: []byte("v"), Origin: 2, Request: 1 << 62},
		{Op: OpAcquire, Key: "L", Holder: "h", TTL: 5, HasAuth: true, AuthHash: HashToken("coord_secret")},
		{Op: OpRelease, Key: "L", Holder: "h", Token: 3, Origin: 3, Request: 9, HasAuth: true, AuthHash: HashToken("x")},
	} {
		b := c.Marshal()
		if b[0] != commandVersionAuth {
			t.Errorf("%+v encodes as version %d, want %d", c, b[0], commandVersionAuth)
		}
		got, err := UnmarshalCommand(b)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("round trip of %+v: got %+v, %v", c, got, err)
		}
	}
}

func TestUnmarshalForwardedCommandRejectsBadInput(t *testing.T) {
	good := Command{Op: OpPut, Key: "k", Origin: 2, Request: 5}.Marshal()
	// good ends with the empty token hash (a zero length).
	shortHash := append(bytes.Clone(good[:len(good)-1]), 3, 1, 2, 3)
	for name, data := range map[string][]byte{
		"truncated":       good[:len(good)-1],
		"trailing":        append(bytes.Clone(good), 0),
		"hash of 3 bytes": shortHash,
		"hash too long":   append(bytes.Clone(good[:len(good)-1]), append([]byte{TokenHashBytes + 1}, make([]byte, TokenHashBytes+1)...)...),
	} {
		if _, err := UnmarshalCommand(data); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
}

// The state machine decides a write that carries a token hash against the
// tokens as of the write's entry: a token revoked at an earlier index
// refuses it, whatever the node that took the write believed, and so does
// a token whose role or prefix does not cover it. Nothing is written.
func TestApplyChecksTheTokenAsOfTheEntry(t *testing.T) {
	a := newApplier(t)
	secrets := map[string]Token{
		"write":     {Role: TokenWrite},
		"read":      {Role: TokenRead},
		"write-app": {Role: TokenWrite, KeyPrefix: "app/", LeasePrefix: "app-"},
	}
	ids := map[string]uint64{}
	for secret, tok := range secrets {
		tok.Hash = HashToken(secret)
		ids[secret] = a.want(TokenCreateCommand(tok), StatusOK).Revision
	}
	with := func(secret string, c Command) Command {
		c.HasAuth, c.AuthHash = true, HashToken(secret)
		return c
	}
	a.want(with("write", Command{Op: OpPut, Key: "x", Value: []byte("1")}), StatusOK)
	a.want(with("write-app", Command{Op: OpPut, Key: "app/x", Value: []byte("1")}), StatusOK)
	a.want(with("write-app", Command{Op: OpAcquire, Key: "app-l", Holder: "h", TTL: 1e9}), StatusOK)
	a.want(with("write-app", Command{Op: OpPut, Key: "other", Value: []byte("1")}), StatusForbidden)
	a.want(with("write-app", Command{Op: OpAcquire, Key: "other-l", Holder: "h", TTL: 1e9}), StatusForbidden)
	a.want(with("read", Command{Op: OpDelete, Key: "x"}), StatusForbidden)
	a.want(with("bogus", Command{Op: OpPut, Key: "x", Value: []byte("2")}), StatusUnauthenticated)
	// Revoked at an earlier index: refused, even as a retry of a write
	// the session already holds the answer of.
	a.want(with("write", Command{Op: OpPut, Key: "s", Value: []byte("1"), Client: 1, Seq: 1}), StatusOK)
	a.want(TokenRevokeCommand(ids["write"]), StatusOK)
	a.want(with("write", Command{Op: OpPut, Key: "x", Value: []byte("3")}), StatusUnauthenticated)
	a.want(with("write", Command{Op: OpPut, Key: "s", Value: []byte("1"), Client: 1, Seq: 1}), StatusUnauthenticated)
	if kv, _ := a.m.Get("x"); string(kv.Value) != "1" || kv.Version != 1 {
		t.Fatalf("x = %q version %d after refused writes, want the first write only", kv.Value, kv.Version)
	}
	if _, ok := a.m.Get("other"); ok {
		t.Fatal("a forbidden write was applied")
	}
	// Without a token hash (an insecure cluster, or an entry of an older
	// coord) nothing is checked.
	a.want(Command{Op: OpPut, Key: "x", Value: []byte("4")}, StatusOK)
}

// A forwarded write's waiter hears its own entry's result once, a
// snapshot that covers entries this node never applied fails every waiter
// as of unknown outcome, and request numbers are never 0 (not forwarded).
func TestForwardWaiters(t *testing.T) {
	f := newForwardWaiters()
	chA, chB, chC := make(chan forwardOutcome, forwardOutcomes), make(chan forwardOutcome, forwardOutcomes), make(chan forwardOutcome, forwardOutcomes)
	a, b := f.add(chA), f.add(chB)
	if a == 0 || b == 0 || a == b {
		t.Fatalf("request numbers %d and %d", a, b)
	}
	f.applied(a, Result{Revision: 7})
	f.applied(a, Result{Revision: 8}) // a duplicate entry: nobody waits
	if o := <-chA; o.err != nil || o.res.Revision != 7 {
		t.Fatalf("waiter a heard %+v, want revision 7", o)
	}
	select {
	case o := <-chA:
		t.Fatalf("waiter a heard twice: %+v", o)
	default:
	}
	f.failAll(ErrOutcomeUnknown)
	if o := <-chB; !errors.Is(o.err, ErrOutcomeUnknown) {
		t.Fatalf("waiter b heard %+v after a snapshot, want ErrOutcomeUnknown", o)
	}
	c := f.add(chC)
	f.remove(c) // the request gave up
	f.applied(c, Result{})
	select {
	case o := <-chC:
		t.Fatalf("a removed waiter heard %+v", o)
	default:
	}
	var none *forwardWaiters // a state machine without a node
	none.applied(1, Result{})
	none.failAll(ErrOutcomeUnknown)
}

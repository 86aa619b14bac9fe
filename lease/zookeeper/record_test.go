package zookeeper

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"coord/lease"
)

// decode turns a node's data and stat into a Record, and refuses, as
// lease.ErrCorrupt, what coord never writes. No server: the bytes are
// made here.
func TestDecode(t *testing.T) {
	live := func(czxid int64) *zk.Stat { return &zk.Stat{Czxid: czxid, EphemeralOwner: 7} }
	rec, err := decode("n", []byte("alice"), live(42))
	if err != nil || rec != (lease.Record{Name: "n", Holder: "alice", Token: 42}) {
		t.Fatalf("plain node: %+v, %v", rec, err)
	}
	rec, err = decode("n", encodeRebound(42, "alice"), live(99))
	if err != nil || rec != (lease.Record{Name: "n", Holder: "alice", Token: 42}) {
		t.Fatalf("moved node: %+v, %v", rec, err)
	}

	for _, c := range []struct {
		what string
		data []byte
		stat *zk.Stat
	}{
		{"persistent", []byte("alice"), &zk.Stat{Czxid: 42}},
		{"no czxid", []byte("alice"), live(0)},
		{"no holder", nil, live(42)},
		{"moved, no holder", encodeRebound(4, ""), live(42)},
		{"mark without end", []byte("\x0012"), live(42)},
		{"token not a number", []byte("\x00x\x00alice"), live(42)},
		{"token zero", []byte("\x000\x00alice"), live(42)},
		{"token not earlier", encodeRebound(42, "alice"), live(42)},
		{"token later", encodeRebound(43, "alice"), live(42)},
		{"token overflows", []byte("\x0099999999999999999999\x00alice"), live(42)},
		{"token with a leading zero", []byte("\x00012\x00alice"), live(42)},
		{"holder with NUL", []byte("ali\x00ce"), live(42)},
		{"moved, holder opens with the mark", []byte("\x0012\x00\x00x"), live(42)},
		{"holder too long", []byte(strings.Repeat("h", maxHolderBytes+1)), live(42)},
	} {
		_, err := decode("n", c.data, c.stat)
		if !errors.Is(err, lease.ErrCorrupt) {
			t.Fatalf("%s: want ErrCorrupt, got %v", c.what, err)
		}
	}
}

func TestCheckNameAndChroot(t *testing.T) {
	for _, ok := range []string{"leader", "a.b", "a-b_c", "ünïcode", strings.Repeat("n", maxNameBytes)} {
		if checkName(ok) != nil {
			t.Fatalf("checkName(%q): %v", ok, checkName(ok))
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "tab\there", "nul\x00", strings.Repeat("n", maxNameBytes+1)} {
		if !errors.Is(checkName(bad), lease.ErrInvalid) {
			t.Fatalf("checkName(%q) accepted", bad)
		}
	}
	for _, ok := range []string{"/", "/coord", "/a/b/c"} {
		if checkChroot(ok) != nil {
			t.Fatalf("checkChroot(%q): %v", ok, checkChroot(ok))
		}
	}
	for _, bad := range []string{"", "coord", "/coord/", "//", "/a//b", "/a/./b", "/a/..", "/a\x01", "/" + strings.Repeat("c", maxChrootBytes)} {
		if checkChroot(bad) == nil {
			t.Fatalf("checkChroot(%q) accepted", bad)
		}
	}
	if !errors.Is(checkHolder("a\x00b"), lease.ErrInvalid) {
		t.Fatalf("holder with NUL accepted")
	}
	if !errors.Is(checkHolder(strings.Repeat("h", maxHolderBytes+1)), lease.ErrInvalid) {
		t.Fatalf("long holder accepted")
	}
}

package zookeeper

import (
	"bytes"
	"errors"
	"testing"

	"github.com/go-zookeeper/zk"

	"coord/lease"
)

// FuzzDecode feeds arbitrary node data and stats, as a ZooKeeper server
// returns them for a lease node, to decode: never a panic, an error wraps
// lease.ErrCorrupt, and a record it accepts is one coord could have
// written (its holder passes checkHolder) and encodes back to the same
// data: the holder alone when the token is the node's czxid, else
// encodeRebound.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("alice"), int64(42), int64(7))
	f.Add(encodeRebound(42, "alice"), int64(99), int64(7))
	f.Add(encodeRebound(42, "alice"), int64(42), int64(7)) // token not earlier
	f.Add([]byte("alice"), int64(42), int64(0))            // persistent
	f.Add([]byte("alice"), int64(-1), int64(7))
	f.Add([]byte{}, int64(42), int64(7))
	f.Add([]byte("\x0012"), int64(42), int64(7))
	f.Add([]byte("\x0099999999999999999999\x00alice"), int64(42), int64(7))
	f.Add([]byte("\x0012\x00\x00x"), int64(42), int64(7)) // a holder that opens with the mark
	f.Add([]byte("ali\x00ce"), int64(42), int64(7))
	f.Add([]byte("\x00012\x00alice"), int64(42), int64(7)) // a token with a leading zero
	f.Fuzz(func(t *testing.T, data []byte, czxid, owner int64) {
		stat := &zk.Stat{Czxid: czxid, EphemeralOwner: owner}
		rec, err := decode("n", data, stat)
		if err != nil {
			if !errors.Is(err, lease.ErrCorrupt) {
				t.Fatalf("decode(%q): error %v does not wrap lease.ErrCorrupt", data, err)
			}
			return
		}
		if rec.Name != "n" || rec.Token == 0 || rec.Token > uint64(czxid) {
			t.Fatalf("decode(%q, czxid %d): %+v", data, czxid, rec)
		}
		if err := checkHolder(rec.Holder); err != nil {
			t.Fatalf("decode(%q) accepted a holder coord never writes: %v", data, err)
		}
		want := []byte(rec.Holder)
		if rec.Token != uint64(czxid) {
			want = encodeRebound(rec.Token, rec.Holder)
		}
		if !bytes.Equal(want, data) {
			t.Fatalf("decode(%q) = %+v, which encodes to %q", data, rec, want)
		}
	})
}

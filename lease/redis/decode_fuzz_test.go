package redis

import (
	"errors"
	"testing"
	"time"

	"coord/lease"
)

// FuzzRecord feeds arbitrary stored values, as a lease key read from the
// server holds them, to record: never a panic, an error wraps
// lease.ErrCorrupt, and a value it accepts is the one value() writes for
// the record (one spelling of each token).
func FuzzRecord(f *testing.F) {
	f.Add(value(12, "alice"), int64(1500), uint64(12))
	f.Add(value(12, "a:b"), int64(-1), uint64(12))
	f.Add("", int64(-2), uint64(7)) // free
	f.Add("12", int64(1500), uint64(12))
	f.Add("0:alice", int64(1500), uint64(12))
	f.Add("12:", int64(1500), uint64(12))
	f.Add(":alice", int64(1500), uint64(12))
	f.Add("012:alice", int64(1500), uint64(12))
	f.Add("+12:alice", int64(1500), uint64(12))
	f.Add("99999999999999999999:alice", int64(1500), uint64(12))
	b := &Backend{cfg: DefaultConfig()}
	sent := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string, pttl int64, counter uint64) {
		rec, err := b.record("n", reply{value: v, pttl: pttl, counter: counter}, sent)
		if err != nil {
			if !errors.Is(err, lease.ErrCorrupt) {
				t.Fatalf("record(%q): error %v does not wrap lease.ErrCorrupt", v, err)
			}
			return
		}
		if v == "" {
			if rec != (lease.Record{Name: "n", Token: counter}) {
				t.Fatalf("free lease: %+v", rec)
			}
			return
		}
		if got := value(rec.Token, rec.Holder); got != v {
			t.Fatalf("record(%q) = %+v, which is stored as %q", v, rec, got)
		}
		if (pttl > 0) != !rec.Expiry.IsZero() {
			t.Fatalf("pttl %d: expiry %v", pttl, rec.Expiry)
		}
	})
}

// FuzzDecodeReply feeds arbitrary script replies, as the client library
// parses them from the server's answer, to decode: never a panic, and an
// error wraps lease.ErrCorrupt. Each element is an int64, a string or nil
// as the flags choose, the shapes a Lua reply takes.
func FuzzDecodeReply(f *testing.F) {
	f.Add(uint8(4), uint8(0b0101), int64(1), "12:alice", int64(1500), "12")
	f.Add(uint8(4), uint8(0b0101), int64(0), "", int64(-2), "7")
	f.Add(uint8(4), uint8(0b0000), int64(0), "", int64(-2), "")
	f.Add(uint8(3), uint8(0b0101), int64(1), "12:alice", int64(1500), "12")
	f.Add(uint8(4), uint8(0b0101), int64(1), "12:alice", int64(1500), "x")
	f.Add(uint8(4), uint8(0b1111), int64(1), "12:alice", int64(1500), "12")
	f.Fuzz(func(t *testing.T, n, kinds uint8, won int64, v string, pttl int64, counter string) {
		ints := []int64{won, 0, pttl, 0}
		texts := []string{"1", v, "1500", counter}
		res := make([]any, int(n)%6)
		for i := range res {
			switch {
			case i < 4 && kinds&(1<<i) != 0:
				res[i] = texts[i]
			case i < 4 && kinds&(1<<(i+4)) != 0:
				res[i] = nil
			case i < 4:
				res[i] = ints[i]
			}
		}
		if _, err := decode(res); err != nil && !errors.Is(err, lease.ErrCorrupt) {
			t.Fatalf("decode(%v): error %v does not wrap lease.ErrCorrupt", res, err)
		}
	})
}

//go:build linux

package file

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"
)

// FuzzDecodeRecord feeds arbitrary bytes, as a record file (or the lock
// file, which holds a copy of one) read from the lease directory, to
// decodeRecord: errors wrap errFormat, never a panic, and a record it
// accepts encodes again (encodeLine) to a line that decodes the same.
func FuzzDecodeRecord(f *testing.F) {
	rec := fileRecord{Name: "leader", Version: 3, ID: "9f2c", Prev: "77aa", Holder: "node-1", Token: 12, PID: 4242,
		Boot: "b00t", NetNS: 4026531840, Socket: "coord-lease-1", ExpiresMonoNS: 5e9, TTLNS: 2e9,
		Written: time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)}
	valid := encodeLine(recordMagic, rec)
	f.Add(valid)
	f.Add(encodeLine(recordMagic, fileRecord{Name: "leader", Version: 3, ID: "1"})) // free
	f.Add(encodeLine(recordMagic, fileRecord{Name: "leader", Version: 3, ID: "1", Holder: "x"}))
	f.Add(encodeLine(recordMagic, fileRecord{Name: "other", Version: 3, ID: "1"}))
	f.Add(valid[:len(valid)-1])                                                // no newline
	f.Add(valid[:len(recordMagic)+5])                                          // inside the checksum
	f.Add(bytes.Replace(valid, []byte(`"token":12`), []byte(`"token":13`), 1)) // a checksum that fails
	f.Add([]byte(recordMagic + " 00000000 {}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRecord("leader", 3, data)
		if err != nil {
			if !errors.Is(err, errFormat) {
				t.Fatalf("error %v does not wrap errFormat", err)
			}
			return
		}
		again, err := decodeRecord("leader", 3, encodeLine(recordMagic, r))
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("re-decode: %+v (%v), want %+v", again, err, r)
		}
	})
}

// FuzzDecodeSlots feeds arbitrary bytes, as the reservation file, to
// decodeSlots: never a panic, and the slot it picks is a valid one of the
// two, with the highest sequence of those that are valid.
func FuzzDecodeSlots(f *testing.F) {
	one := encodeSlot(reserveMagic, reserveSlot{Seq: 1, Reserved: 1000})
	two := encodeSlot(reserveMagic, reserveSlot{Seq: 2, Reserved: 2000})
	f.Add(append(bytes.Clone(one), two...))
	f.Add(append(bytes.Clone(two), one...))
	f.Add(one)
	f.Add(append(bytes.Clone(one), two[:100]...)) // a torn second slot
	torn := append(bytes.Clone(one), two...)
	torn[slotSize+len(reserveMagic)+3] ^= 0x01 // the second slot's checksum
	f.Add(torn)
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := decodeSlots(data, reserveMagic, func(s reserveSlot) uint64 { return s.Seq })
		var valid []reserveSlot
		for i := range 2 {
			lo := i * slotSize
			if lo >= len(data) {
				break
			}
			var s reserveSlot
			if decodeLine(reserveMagic, data[lo:min(lo+slotSize, len(data))], &s) == nil {
				valid = append(valid, s)
			}
		}
		if ok != (len(valid) > 0) {
			t.Fatalf("found %v, with %d valid slots", ok, len(valid))
		}
		for _, s := range valid {
			if s.Seq > got.Seq {
				t.Fatalf("picked %+v over %+v", got, s)
			}
		}
		if ok && !slicesContain(valid, got) {
			t.Fatalf("picked %+v, not one of the valid slots %+v", got, valid)
		}
	})
}

func slicesContain(slots []reserveSlot, s reserveSlot) bool {
	for _, v := range slots {
		if v == s {
			return true
		}
	}
	return false
}

// FuzzParseVersionFile checks the parser of record file names (directory
// entries, which anything may create) against versionFile: a name it
// accepts is exactly the one versionFile makes of its number.
func FuzzParseVersionFile(f *testing.F) {
	f.Add("leader", versionFile("leader", 7))
	f.Add("leader", ".leader.v")
	f.Add("leader", ".leader.v007")
	f.Add("leader", ".leader.v0")
	f.Add("leader", ".leader.v99999999999999999999")
	f.Add("a.v1", ".a.v1.v2")
	f.Fuzz(func(t *testing.T, name, entry string) {
		n, ok := parseVersionFile(name, entry)
		if !ok {
			return
		}
		if n == 0 {
			t.Fatalf("%q: version 0 accepted", entry)
		}
		// Leading zeros are the one way to spell a number twice.
		if back := versionFile(name, n); back != entry && !bytes.HasPrefix([]byte(entry[len(name)+3:]), []byte("0")) {
			t.Fatalf("%q parses as %d, which is named %q", entry, n, back)
		}
	})
}

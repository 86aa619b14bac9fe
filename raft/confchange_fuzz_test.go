package raft

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// FuzzUnmarshalConfChange feeds a configuration change's encoding, as a
// log entry from the leader or the disk carries it, to
// UnmarshalConfChange: errors wrap ErrInvalidConfChange, never a panic,
// and what decodes encodes again to bytes that decode the same.
func FuzzUnmarshalConfChange(f *testing.F) {
	valid := ConfChange{Changes: []ConfChangeSingle{{ConfChangeAddVoter, 3}, {ConfChangeAddLearner, 1 << 40}, {ConfChangeRemove, 7}},
		Context: []byte("10.0.0.7:7000")}.Marshal()
	f.Add(valid)
	f.Add(ConfChange{}.Marshal())
	f.Add(valid[:len(valid)-1])
	f.Add(append(bytes.Clone(valid), 0))
	f.Add([]byte{confChangeVersion, 0xff, 0xff, 0x03}) // a count over the input
	for _, at := range []int{0, 1, 2, 3} {
		b := bytes.Clone(valid)
		b[at] ^= 0x80
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cc, err := UnmarshalConfChange(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfChange) {
				t.Fatalf("error %v does not wrap ErrInvalidConfChange", err)
			}
			return
		}
		again, err := UnmarshalConfChange(cc.Marshal())
		if err != nil || !reflect.DeepEqual(again, cc) {
			t.Fatalf("re-decode: %+v (%v), want %+v", again, err, cc)
		}
	})
}

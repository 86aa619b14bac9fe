package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"runtime"
	"testing"
)

// The decoders of what a command's Value carries, read from the log (a
// peer's entries, or the disk's) by every replica: FuzzUnmarshalCommand
// covers the command around them, these its payloads. Each must return
// errors wrapping ErrMalformed, never panic, and what it accepts must
// encode again to bytes that decode the same.

// FuzzUnmarshalBatchOps feeds OpBatch's Value to unmarshalBatchOps.
func FuzzUnmarshalBatchOps(f *testing.F) {
	valid := marshalBatchOps([]BatchOp{
		{Op: OpPut, Key: "a", Value: []byte("1"), HasPrev: true, PrevRevision: 7},
		{Op: OpDelete, Key: "b"},
		{Op: OpPut, Key: "c", Value: bytes.Repeat([]byte{0xff}, 200)},
	})
	f.Add(valid)
	f.Add(marshalBatchOps(nil))
	f.Add(valid[:len(valid)-1])
	f.Add(append(bytes.Clone(valid), 0))
	f.Add([]byte{0xff, 0xff, 0x03}) // a count far over the input
	for _, at := range []int{0, 1, 2, 5} {
		b := bytes.Clone(valid)
		b[at] ^= 0x80
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ops, err := unmarshalBatchOps(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again, err := unmarshalBatchOps(marshalBatchOps(ops))
		if err != nil || !reflect.DeepEqual(again, ops) {
			t.Fatalf("re-decode: %+v (%v), want %+v", again, err, ops)
		}
	})
}

// FuzzUnmarshalPeerAddress feeds OpPeerSet's Value to unmarshalPeerAddress.
func FuzzUnmarshalPeerAddress(f *testing.F) {
	valid := peerAddress{ID: 3, Addr: "127.0.0.1:7000"}.marshal()
	f.Add(valid)
	f.Add(valid[:len(valid)-2])
	f.Add(append([]byte{peerVersion + 1}, valid[1:]...))
	f.Add(append(bytes.Clone(valid), 'x'))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := unmarshalPeerAddress(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if len(p.Addr) > maxPeerAddressBytes {
			t.Fatalf("address of %d bytes accepted", len(p.Addr))
		}
		if again, err := unmarshalPeerAddress(p.marshal()); err != nil || again != p {
			t.Fatalf("re-decode: %+v (%v), want %+v", again, err, p)
		}
	})
}

// FuzzUnmarshalToken feeds OpTokenCreate's and OpTokenBootstrap's Value to
// unmarshalToken.
func FuzzUnmarshalToken(f *testing.F) {
	valid := Token{Hash: HashToken("secret"), Role: TokenRead, KeyPrefix: "app/", LeasePrefix: "app-", Name: "ci"}.marshal()
	f.Add(valid)
	f.Add(Token{Hash: HashToken("admin"), Role: TokenAdmin}.marshal())
	f.Add(valid[:10]) // inside the hash
	f.Add([]byte{tokenVersion, 3, 1, 2, 3, 1, 0, 0, 0})
	f.Add(append(bytes.Clone(valid), 0))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := unmarshalToken(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if again, err := unmarshalToken(tok.marshal()); err != nil || again != tok {
			t.Fatalf("re-decode: %+v (%v), want %+v", again, err, tok)
		}
	})
}

// FuzzParseBatch feeds a client's JSON body of POST /v1/batch to
// parseBatch: errors wrap ErrInvalid, never a panic, and the ops it
// accepts are ones the log's encoding carries unchanged.
func FuzzParseBatch(f *testing.F) {
	f.Add([]byte(`{"ops":[{"op":"put","key":"a","value":"1","prev_revision":3},{"op":"delete","key":"b"}]}`))
	f.Add([]byte(`{"ops":[{"op":"put","key":"a","value_base64":"/w=="}]}`))
	f.Add([]byte(`{"ops":[{"op":"put","key":"a","value":"1","value_base64":"MQ=="}]}`)) // a value twice
	f.Add([]byte(`{"ops":[{"op":"get","key":"a"}]}`))
	f.Add([]byte(`{"ops":[]} }`)) // data after the object
	f.Add([]byte(`{"ops":[{"op":"put","key":"a","value":"\xff"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ops, err := parseBatch(body)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		again, err := unmarshalBatchOps(marshalBatchOps(ops))
		if err != nil || (len(ops) > 0 && !reflect.DeepEqual(again, ops)) {
			t.Fatalf("ops %+v through the log's encoding: %+v (%v)", ops, again, err)
		}
	})
}

// A batch whose count its bytes cannot hold is refused before its ops are
// allocated: a count of one op per byte of the entry made the decoder
// allocate 64 bytes per byte of input (64 MiB for this 1 MiB entry) before
// finding the ops missing.
func TestUnmarshalBatchOpsBoundsItsAllocation(t *testing.T) {
	const inputBytes = 1 << 20
	data := binary.AppendUvarint(nil, inputBytes-3) // as many ops as bytes after the count
	data = append(data, make([]byte, inputBytes-len(data))...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := unmarshalBatchOps(data)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("unmarshalBatchOps of %d ops in %d bytes: %v, want ErrMalformed", inputBytes-3, len(data), err)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 4*inputBytes {
		t.Fatalf("decoding %d bytes allocated %d", len(data), allocated)
	}
}

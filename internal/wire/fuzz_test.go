package wire_test

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"
	"testing/iotest"

	"coord/internal/wire"
)

// The kinds of read a fuzz script asks for, one per byte of the script
// (the byte modulo readKinds); the next byte, where one is needed, is the
// read's limit.
const (
	readByte = iota
	readUvarint
	readVarint
	readBytes
	readString
	readBool
	readCount
	readKinds
)

// scriptOpsMax bounds the reads of one script: the decoder stops at the
// first error anyway.
const scriptOpsMax = 64

// read is one read of a script: its kind and limit.
type read struct {
	kind int
	max  int
}

// parseScript turns the fuzzer's script bytes into reads.
func parseScript(script []byte) []read {
	var reads []read
	for i := 0; i < len(script) && len(reads) < scriptOpsMax; i++ {
		r := read{kind: int(script[i]) % readKinds}
		if r.kind == readBytes || r.kind == readString || r.kind == readCount {
			r.max = math.MaxInt
			if i+1 < len(script) {
				i++
				r.max = int(script[i]) * 4 // 0 to 1020: limits are hit too
			}
		}
		reads = append(reads, r)
	}
	return reads
}

// run applies reads to d and returns what each read returned, up to and
// including the first that failed.
func run(d *wire.Decoder, reads []read) []any {
	var got []any
	for _, r := range reads {
		var v any
		switch r.kind {
		case readByte:
			v = d.Byte("byte")
		case readUvarint:
			v = d.Uvarint("uvarint")
		case readVarint:
			v = d.Varint("varint")
		case readBytes:
			v = d.Bytes("bytes", r.max)
		case readString:
			v = d.String("string", r.max)
		case readBool:
			v = d.Bool("bool")
		case readCount:
			v = d.Count("count", r.max)
		}
		got = append(got, v)
		if d.Err() != nil {
			break
		}
	}
	return got
}

// encode writes values (what run returned, all read without error) with
// an Encoder, as the kinds of reads say.
func encode(reads []read, values []any) []byte {
	var e wire.Encoder
	for i, v := range values {
		switch reads[i].kind {
		case readByte:
			e.Byte(v.(byte))
		case readUvarint:
			e.Uvarint(v.(uint64))
		case readVarint:
			e.Varint(v.(int64))
		case readBytes:
			e.Bytes(v.([]byte))
		case readString:
			e.String(v.(string))
		case readBool:
			e.Bool(v.(bool))
		case readCount:
			e.Uvarint(uint64(v.(int)))
		}
	}
	return e.Buf
}

// FuzzDecoder runs a script of reads (the first input) over arbitrary
// bytes (the second) with a buffer's Decoder and with a stream's, which
// reads its source one byte at a time: neither may panic, both must read
// the same values and fail at the same read with the same error, and what
// decodes must re-encode to bytes that decode to the same values with
// nothing left over.
func FuzzDecoder(f *testing.F) {
	var e wire.Encoder
	e.Byte(7)
	e.Uvarint(math.MaxUint64)
	e.Varint(-42)
	e.Bytes([]byte("payload"))
	e.String("name")
	e.Bool(true)
	e.Uvarint(3)
	valid := e.Buf
	script := []byte{readByte, readUvarint, readVarint, readBytes, 255, readString, 255, readBool, readCount, 255}
	f.Add(script, valid)
	f.Add(script, valid[:len(valid)-1])                        // truncated
	f.Add(script, valid[:12])                                  // cut inside the varint's run
	f.Add(script, append(bytes.Clone(valid), 0))               // trailing byte
	f.Add([]byte{readBytes, 1}, valid[12:])                    // a length over its limit
	f.Add([]byte{readBool}, []byte{2})                         // not a boolean
	f.Add([]byte{readUvarint}, bytes.Repeat([]byte{0xff}, 11)) // a varint that overflows
	f.Add([]byte{readCount, 255}, []byte{0xff, 0x7f})          // a count over the input
	f.Fuzz(func(t *testing.T, script, data []byte) {
		reads := parseScript(script)
		buffered := wire.NewDecoder(data, errBad)
		got := run(buffered, reads)
		stream := wire.NewStreamDecoder(iotest.OneByteReader(bytes.NewReader(data)), int64(len(data)), errBad)
		streamed := run(stream, reads)
		if !reflect.DeepEqual(got, streamed) {
			t.Fatalf("buffer decoder read %v, stream decoder %v", got, streamed)
		}
		if err, serr := buffered.Err(), stream.Err(); (err == nil) != (serr == nil) || (err != nil && err.Error() != serr.Error()) {
			t.Fatalf("buffer decoder's error %v, stream decoder's %v", err, serr)
		}
		if buffered.Left() != stream.Left() {
			t.Fatalf("buffer decoder has %d bytes left, stream decoder %d", buffered.Left(), stream.Left())
		}
		if err := buffered.Err(); err != nil {
			if !errors.Is(err, errBad) {
				t.Fatalf("error %v does not wrap the malformed sentinel", err)
			}
			got = got[:len(got)-1] // the failed read's zero value
		}
		if len(got) == 0 {
			return
		}
		// A count is checked against the bytes after it, which the script
		// may not read: the round trip reads it back as the varint it is.
		reads, want := reads[:len(got)], slices.Clone(got)
		for i := range reads {
			if reads[i].kind == readCount {
				reads[i].kind, want[i] = readUvarint, uint64(want[i].(int))
			}
		}
		again := wire.NewDecoder(encode(reads, want), errBad)
		if back := run(again, reads); !reflect.DeepEqual(back, want) || again.Done() != nil {
			t.Fatalf("re-encoded values decode to %v (%v), want %v", back, again.Done(), want)
		}
	})
}

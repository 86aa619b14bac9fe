package wire_test

import (
	"bytes"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"coord/internal/wire"
)

var errBad = errors.New("test: malformed")

func TestRoundTrip(t *testing.T) {
	var e wire.Encoder
	e.Byte(7)
	e.Uvarint(math.MaxUint64)
	e.Varint(-42)
	e.Bytes([]byte("payload"))
	e.Bytes(nil)
	e.String("key")
	e.Bool(true)
	e.Uvarint(2) // a count
	e.Byte(1)
	e.Byte(2)

	d := wire.NewDecoder(e.Buf, errBad)
	if b := d.Byte("b"); b != 7 {
		t.Errorf("Byte = %d", b)
	}
	if v := d.Uvarint("u"); v != math.MaxUint64 {
		t.Errorf("Uvarint = %d", v)
	}
	if v := d.Varint("v"); v != -42 {
		t.Errorf("Varint = %d", v)
	}
	if b := d.Bytes("p", 100); !bytes.Equal(b, []byte("payload")) {
		t.Errorf("Bytes = %q", b)
	}
	if b := d.Bytes("empty", 100); b != nil {
		t.Errorf("empty Bytes = %#v, want nil", b)
	}
	if s := d.String("s", 100); s != "key" {
		t.Errorf("String = %q", s)
	}
	if !d.Bool("bool") {
		t.Error("Bool = false")
	}
	if n := d.Count("n", 10); n != 2 {
		t.Errorf("Count = %d", n)
	}
	d.Byte("1")
	d.Byte("2")
	if err := d.Done(); err != nil {
		t.Fatalf("Done = %v", err)
	}
}

func TestMalformed(t *testing.T) {
	long := (&wire.Encoder{})
	long.Bytes(bytes.Repeat([]byte("x"), 10))
	tests := []struct {
		name string
		in   []byte
		read func(d *wire.Decoder)
		want string
	}{
		{"truncated byte", nil, func(d *wire.Decoder) { d.Byte("version") }, "version: truncated"},
		{"bad varint", []byte{0xff}, func(d *wire.Decoder) { d.Uvarint("term") }, "term: bad varint"},
		{"length over limit", long.Buf, func(d *wire.Decoder) { d.Bytes("value", 5) }, "over limit 5"},
		{"length over input", []byte{50, 'x'}, func(d *wire.Decoder) { d.Bytes("value", 100) }, "or input 1"},
		{"count over input", []byte{200, 1}, func(d *wire.Decoder) { d.Count("entries", 1000) }, "count 200"},
		{"not a boolean", []byte{2}, func(d *wire.Decoder) { d.Bool("reject") }, "reject: not a boolean"},
		{"trailing bytes", []byte{1, 2}, func(d *wire.Decoder) { d.Byte("one") }, "1 trailing bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := wire.NewDecoder(tt.in, errBad)
			tt.read(d)
			err := d.Done()
			if !errors.Is(err, errBad) {
				t.Fatalf("Done = %v, want an error wrapping errBad", err)
			}
			if !bytes.Contains([]byte(err.Error()), []byte(tt.want)) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

func TestFirstErrorSticks(t *testing.T) {
	d := wire.NewDecoder([]byte{0xff}, errBad)
	d.Uvarint("first")
	if v := d.Byte("second"); v != 0 {
		t.Errorf("read after an error = %d, want 0", v)
	}
	if err := d.Err(); err == nil || !bytes.Contains([]byte(err.Error()), []byte("first")) {
		t.Errorf("Err = %v, want the first failure", err)
	}
}

// TestStreamDecoderReadsWhatTheSliceDecoderReads decodes the same bytes
// from a slice and from a stream handed over one byte at a time, with a
// field longer than the stream's read-ahead window.
func TestStreamDecoderReadsWhatTheSliceDecoderReads(t *testing.T) {
	var e wire.Encoder
	long := bytes.Repeat([]byte("0123456789"), 20000) // 200 kB, over the window
	e.Uvarint(math.MaxUint64)
	e.Varint(-42)
	e.Bytes(long)
	e.String("key")
	e.Bool(true)
	e.Uvarint(3)
	for range 3 {
		e.Bytes([]byte("element"))
	}
	read := func(d *wire.Decoder) []any {
		out := []any{d.Uvarint("u"), d.Varint("v"), string(d.Bytes("long", len(long))), d.String("s", 10), d.Bool("b")}
		for range d.Count("n", 10) {
			out = append(out, d.String("element", 10))
		}
		return append(out, d.Done())
	}
	want := read(wire.NewDecoder(e.Buf, errBad))
	for name, r := range map[string]io.Reader{
		"whole":    bytes.NewReader(e.Buf),
		"one byte": iotest.OneByteReader(bytes.NewReader(e.Buf)),
		"half":     iotest.HalfReader(bytes.NewReader(e.Buf)),
	} {
		got := read(wire.NewStreamDecoder(r, int64(len(e.Buf)), errBad))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: stream decoded differently from the slice", name)
		}
	}
}

func TestStreamDecoderRefusesShortAndFailingInput(t *testing.T) {
	var e wire.Encoder
	e.Bytes(bytes.Repeat([]byte("x"), 100000))
	e.Uvarint(7)
	// The size promises more than the reader holds: truncated.
	d := wire.NewStreamDecoder(bytes.NewReader(e.Buf[:50000]), int64(len(e.Buf)), errBad)
	d.Bytes("value", 1<<20)
	if err := d.Done(); !errors.Is(err, errBad) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("short stream: %v, want truncated", err)
	}
	// A length over what the size leaves is refused before any allocation.
	d = wire.NewStreamDecoder(bytes.NewReader(e.Buf), 1000, errBad)
	d.Bytes("value", 1<<20)
	if err := d.Done(); !errors.Is(err, errBad) || !strings.Contains(err.Error(), "or input") {
		t.Errorf("length over the size: %v", err)
	}
	// A read error is the reader's, not malformed input.
	d = wire.NewStreamDecoder(iotest.ErrReader(io.ErrClosedPipe), 10, errBad)
	d.Uvarint("first")
	if err := d.Done(); !errors.Is(err, io.ErrClosedPipe) || errors.Is(err, errBad) {
		t.Errorf("failing reader: %v, want the read error", err)
	}
	// Bytes left over are trailing bytes, as for a slice.
	d = wire.NewStreamDecoder(bytes.NewReader(e.Buf), int64(len(e.Buf)), errBad)
	d.Bytes("value", 1<<20)
	if err := d.Done(); !errors.Is(err, errBad) || !strings.Contains(err.Error(), "trailing") {
		t.Errorf("left over: %v, want trailing bytes", err)
	}
}

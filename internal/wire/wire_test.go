package wire_test

import (
	"bytes"
	"errors"
	"math"
	"testing"

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

package server

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed means an encoded command, result or snapshot could not be
// decoded. Decoding never panics on bad input; it returns this error with
// what was wrong.
var ErrMalformed = errors.New("server: malformed encoding")

// encoder appends primitive values to a byte slice.
type encoder struct{ buf []byte }

func (e *encoder) byte(b byte)      { e.buf = append(e.buf, b) }
func (e *encoder) uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }
func (e *encoder) varint(v int64)   { e.buf = binary.AppendVarint(e.buf, v) }
func (e *encoder) bytes(b []byte)   { e.uvarint(uint64(len(b))); e.buf = append(e.buf, b...) }
func (e *encoder) string(s string)  { e.uvarint(uint64(len(s))); e.buf = append(e.buf, s...) }

func (e *encoder) bool(b bool) {
	if b {
		e.byte(1)
	} else {
		e.byte(0)
	}
}

// decoder reads what encoder wrote. The first error sticks: later reads
// return zero values, and err reports what failed first.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMalformed, what)
	}
}

func (d *decoder) byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.buf) == 0 {
		d.fail(what + ": truncated")
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail(what + ": bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail(what + ": bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) bytes(what string, max int) []byte {
	n := d.uvarint(what + " length")
	if d.err != nil {
		return nil
	}
	if n > uint64(max) || n > uint64(len(d.buf)) {
		d.fail(fmt.Sprintf("%s: length %d over limit or input", what, n))
		return nil
	}
	b := make([]byte, n)
	copy(b, d.buf[:n])
	d.buf = d.buf[n:]
	return b
}

func (d *decoder) string(what string, max int) string { return string(d.bytes(what, max)) }

func (d *decoder) bool(what string) bool {
	switch d.byte(what) {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail(what + ": not a boolean")
		return false
	}
}

// count reads a collection length and checks it against max.
func (d *decoder) count(what string, max int) int {
	n := d.uvarint(what)
	if d.err == nil && n > uint64(max) {
		d.fail(fmt.Sprintf("%s: %d over limit %d", what, n, max))
		return 0
	}
	return int(n)
}

// done fails unless the input was consumed exactly.
func (d *decoder) done() error {
	if d.err == nil && len(d.buf) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.buf)))
	}
	return d.err
}

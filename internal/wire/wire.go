package wire

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Encoder appends values to Buf. Its zero value is ready to use.
type Encoder struct {
	Buf []byte
}

// Byte appends b.
func (e *Encoder) Byte(b byte) { e.Buf = append(e.Buf, b) }

// Uvarint appends v as an unsigned varint.
func (e *Encoder) Uvarint(v uint64) { e.Buf = binary.AppendUvarint(e.Buf, v) }

// Varint appends v as a signed varint.
func (e *Encoder) Varint(v int64) { e.Buf = binary.AppendVarint(e.Buf, v) }

// Bytes appends b, prefixed with its length.
func (e *Encoder) Bytes(b []byte) { e.Uvarint(uint64(len(b))); e.Buf = append(e.Buf, b...) }

// String appends s, prefixed with its length.
func (e *Encoder) String(s string) { e.Uvarint(uint64(len(s))); e.Buf = append(e.Buf, s...) }

// Bool appends b as one byte, 0 or 1.
func (e *Encoder) Bool(b bool) {
	if b {
		e.Byte(1)
	} else {
		e.Byte(0)
	}
}

// Decoder reads what an Encoder wrote. Each read names what it reads, for
// the error message.
type Decoder struct {
	// buf holds the bytes at hand. A stream decoder refills it from src,
	// which has unread bytes left, through window.
	buf       []byte
	src       io.Reader
	unread    int64
	window    []byte
	err       error
	malformed error
}

// NewDecoder returns a Decoder of buf whose errors wrap malformed (the
// caller's sentinel, such as server.ErrMalformed).
func NewDecoder(buf []byte, malformed error) *Decoder {
	return &Decoder{buf: buf, malformed: malformed}
}

// streamWindow is how much a stream decoder reads ahead.
const streamWindow = 64 << 10

// NewStreamDecoder returns a Decoder of the size bytes that r holds, read
// as they are needed, so that a large input (a snapshot) is never held in
// memory whole. Lengths and counts are checked against what is left of
// size, as NewDecoder's are against the buffer. A read error of r is
// reported as is (not as malformed); r ending before size bytes is
// "truncated".
func NewStreamDecoder(r io.Reader, size int64, malformed error) *Decoder {
	return &Decoder{src: r, unread: size, window: make([]byte, 0, streamWindow), malformed: malformed}
}

// fill makes at least n bytes (n <= streamWindow) available in buf, if
// that many are left; it reports whether they are.
func (d *Decoder) fill(n int) bool {
	if len(d.buf) >= n {
		return true
	}
	if d.src == nil || d.err != nil || int64(n) > int64(len(d.buf))+d.unread {
		return false
	}
	w := d.window[:copy(d.window[:cap(d.window)], d.buf)]
	more := int(min(int64(cap(w)-len(w)), d.unread))
	got, err := io.ReadFull(d.src, w[len(w):len(w)+more])
	d.unread -= int64(got)
	d.buf = w[:len(w)+got]
	if err != nil {
		d.readFailed(err)
		return false
	}
	return len(d.buf) >= n
}

// readFailed records an error of the source.
func (d *Decoder) readFailed(err error) {
	if d.err != nil {
		return
	}
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		d.Fail("truncated: input ended early")
		return
	}
	d.err = fmt.Errorf("read: %w", err)
}

// Left returns how many bytes are left to read.
func (d *Decoder) Left() int64 { return int64(len(d.buf)) + d.unread }

// Err returns the first error, or nil.
func (d *Decoder) Err() error { return d.err }

// Rest returns the bytes not read yet; of a stream decoder, only those it
// has read ahead (see Left).
func (d *Decoder) Rest() []byte { return d.buf }

// Fail records an error (unless one is recorded already) saying what was
// wrong.
func (d *Decoder) Fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", d.malformed, what)
	}
}

// Byte reads one byte.
func (d *Decoder) Byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if !d.fill(1) {
		d.Fail(what + ": truncated")
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	d.fill(min(binary.MaxVarintLen64, int(min(d.Left(), binary.MaxVarintLen64))))
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.Fail(what + ": bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// Varint reads a signed varint.
func (d *Decoder) Varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	d.fill(min(binary.MaxVarintLen64, int(min(d.Left(), binary.MaxVarintLen64))))
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.Fail(what + ": bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// Bytes reads a length-prefixed byte string of at most max bytes, into a
// new slice (nil when empty).
func (d *Decoder) Bytes(what string, max int) []byte {
	n := d.Uvarint(what + " length")
	if d.err != nil {
		return nil
	}
	if n > uint64(max) || n > uint64(d.Left()) {
		d.Fail(fmt.Sprintf("%s: length %d over limit %d or input %d", what, n, max, d.Left()))
		return nil
	}
	if n == 0 {
		return nil
	}
	b := make([]byte, n)
	at := copy(b, d.buf)
	d.buf = d.buf[at:]
	if at < len(b) {
		// A stream's long field: straight from the source, not through
		// the window.
		got, err := io.ReadFull(d.src, b[at:])
		d.unread -= int64(got)
		if err != nil {
			d.readFailed(err)
			return nil
		}
	}
	return b
}

// String reads a length-prefixed string of at most max bytes.
func (d *Decoder) String(what string, max int) string { return string(d.Bytes(what, max)) }

// Bool reads one byte that must be 0 or 1.
func (d *Decoder) Bool(what string) bool {
	switch d.Byte(what) {
	case 0:
		return false
	case 1:
		return true
	default:
		d.Fail(what + ": not a boolean")
		return false
	}
}

// Count reads the length of a collection and checks it against max and
// against the bytes left (every element takes at least one byte), so that
// a caller may allocate that many elements.
func (d *Decoder) Count(what string, max int) int {
	n := d.Uvarint(what)
	if d.err == nil && (n > uint64(max) || n > uint64(d.Left())) {
		d.Fail(fmt.Sprintf("%s: count %d over limit %d or input %d", what, n, max, d.Left()))
		return 0
	}
	return int(n)
}

// Done returns the first error, or an error if input is left over.
func (d *Decoder) Done() error {
	if d.err == nil && d.Left() != 0 {
		d.Fail(fmt.Sprintf("%d trailing bytes", d.Left()))
	}
	return d.err
}

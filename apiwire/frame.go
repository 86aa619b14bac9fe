package apiwire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
)

// Preface opens a plain (not TLS) wire connection: a server that reads it
// first speaks wire on the connection, HTTP otherwise. It cannot start an
// HTTP/1.x request line or HTTP/2's preface.
const Preface = "COORD-WIRE/1\r\n\r\n"

// ALPN is the TLS application protocol a client offers, and a server
// agrees to, to speak wire over TLS.
const ALPN = "coord-wire/1"

// FrameType says what a frame carries (the package doc lists them).
type FrameType uint8

// The frame types.
const (
	FrameRequest FrameType = 1
	FrameHead    FrameType = 2
	FrameData    FrameType = 3
	FrameEnd     FrameType = 4
	FrameCancel  FrameType = 5
	FrameRefuse  FrameType = 6
	FrameAbort   FrameType = 7
)

// frameHeaderBytes is the fixed part of a frame: length, stream, type.
const frameHeaderBytes = 9

// ErrMalformed is wrapped by every error about bytes that break the
// format or a limit.
var ErrMalformed = errors.New("apiwire: malformed frame")

// ErrRefused is wrapped by the error of a request the server refused
// before its handler ran (FrameRefuse: too many streams, or the server is
// shutting down): it had no effect, and may be sent again. An answer lost
// after the handler ran (FrameAbort) is not refused: it may have had its
// effect.
var ErrRefused = errors.New("apiwire: request refused before it was served")

// RequestHeaders are the request headers that travel: the bearer token,
// the content type and the Coord-* headers of sessions and forwarding
// (any header whose name starts with "Coord-" travels too).
var RequestHeaders = []string{"Authorization", "Content-Type", "Accept", "Last-Event-Id"}

// ResponseHeaders are the answer headers that travel besides Coord-*.
var ResponseHeaders = []string{"Content-Type", "Retry-After", "Location", "Www-Authenticate", "Cache-Control"}

// Limits bound what a peer may send on one connection. Every field must
// be positive; start from DefaultLimits.
type Limits struct {
	// FrameBytesMax bounds a frame's payload: a request's whole body and
	// headers must fit in it (the server's body limit plus HeaderBytesMax).
	FrameBytesMax int
	// StreamsMax bounds the requests in flight on one connection; one
	// more is refused (FrameRefuse) and the connection carries on.
	StreamsMax int
	// HeadersMax bounds the headers of a request or an answer, and
	// HeaderBytesMax their names and values together.
	HeadersMax, HeaderBytesMax int
}

// DefaultLimits returns 4 MiB frames, 1,024 streams, 32 headers of 16 KiB
// in all.
func DefaultLimits() Limits {
	return Limits{FrameBytesMax: 4 << 20, StreamsMax: 1024, HeadersMax: 32, HeaderBytesMax: 16 << 10}
}

// Validate names the fields that are not positive.
func (l Limits) Validate() error {
	var errs []error
	for _, f := range []struct {
		name  string
		value int
	}{{"FrameBytesMax", l.FrameBytesMax}, {"StreamsMax", l.StreamsMax}, {"HeadersMax", l.HeadersMax}, {"HeaderBytesMax", l.HeaderBytesMax}} {
		if f.value <= 0 {
			errs = append(errs, fmt.Errorf("apiwire: Limits.%s %d must be positive", f.name, f.value))
		}
	}
	return errors.Join(errs...)
}

// Frame is one decoded frame. Payload aliases the reader's buffer only
// until the next ReadFrame.
type Frame struct {
	Type    FrameType
	Stream  uint32
	Payload []byte
}

// ReadFrame reads one frame from r into buf (grown as needed, never past
// maxPayload) and returns it with the buffer to pass next time. Errors
// from r are returned as they are (io.EOF between frames); a frame whose
// length passes maxPayload, or an unknown type, wraps ErrMalformed.
func ReadFrame(r *bufio.Reader, buf []byte, maxPayload int) (Frame, []byte, error) {
	return readFrame(r, buf, maxPayload, nil)
}

// readStep is the most of a frame's payload read into memory before its
// bytes have arrived: a header alone does not make the reader allocate
// the length it claims.
const readStep = 64 << 10

// readFrame is ReadFrame, calling afterHeader (if set) once the frame's
// header is read and valid, before its payload.
func readFrame(r *bufio.Reader, buf []byte, maxPayload int, afterHeader func()) (Frame, []byte, error) {
	var head [frameHeaderBytes]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return Frame{}, buf, err
	}
	length := binary.BigEndian.Uint32(head[0:4])
	f := Frame{Stream: binary.BigEndian.Uint32(head[4:8]), Type: FrameType(head[8])}
	if f.Type < FrameRequest || f.Type > FrameAbort {
		return Frame{}, buf, fmt.Errorf("%w: unknown type %d on stream %d", ErrMalformed, f.Type, f.Stream)
	}
	if uint64(length) > uint64(maxPayload) {
		return Frame{}, buf, fmt.Errorf("%w: %d bytes of payload on stream %d, over the limit of %d", ErrMalformed, length, f.Stream, maxPayload)
	}
	if afterHeader != nil {
		afterHeader()
	}
	// The buffer grows as the payload arrives, a step at a time.
	buf = buf[:0]
	for len(buf) < int(length) {
		step := min(int(length)-len(buf), readStep)
		buf = slices.Grow(buf, step)
		n, err := io.ReadFull(r, buf[len(buf):len(buf)+step])
		buf = buf[:len(buf)+n]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, buf, err
		}
	}
	f.Payload = buf
	return f, buf, nil
}

// appendFrame appends a frame of type t on stream with payload to b.
func appendFrame(b []byte, t FrameType, stream uint32, payload []byte) []byte {
	b = appendFrameHeader(b, t, stream, len(payload))
	return append(b, payload...)
}

func appendFrameHeader(b []byte, t FrameType, stream uint32, length int) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(length))
	b = binary.BigEndian.AppendUint32(b, stream)
	return append(b, byte(t))
}

// travels reports whether header name (canonical) is carried, given the
// fixed list of the direction.
func travels(name string, fixed []string) bool {
	if len(name) > 6 && name[:6] == "Coord-" {
		return true
	}
	for _, f := range fixed {
		if f == name {
			return true
		}
	}
	return false
}

// appendHeaders appends the headers of h that travel (first values only
// for the fixed ones, all values for Coord-*), at most max of them.
func appendHeaders(b []byte, h http.Header, fixed []string, max int) ([]byte, error) {
	countAt := len(b)
	b = append(b, 0)
	n := 0
	for name, values := range h {
		if !travels(name, fixed) {
			continue
		}
		for _, v := range values {
			if n == max || n == 255 {
				return nil, fmt.Errorf("apiwire: more than %d headers to send", n)
			}
			if len(name) > 255 || len(v) > 65535 {
				return nil, fmt.Errorf("apiwire: header %s of %d bytes too long to send", name, len(v))
			}
			b = append(b, byte(len(name)))
			b = append(b, name...)
			b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
			b = append(b, v...)
			n++
		}
	}
	b[countAt] = byte(n)
	return b, nil
}

// decoder reads fields off a payload, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (d *decoder) bytes(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.fail("%s of %d bytes past the end of the frame (%d left)", what, n, len(d.b))
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8(what string) int {
	v := d.bytes(1, what)
	if v == nil {
		return 0
	}
	return int(v[0])
}

func (d *decoder) u16(what string) int {
	v := d.bytes(2, what)
	if v == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(v))
}

// headerSpan is where a decoded header's name and value lie in the
// payload: [nameAt, nameEnd) and [valueAt, valueEnd).
type headerSpan struct {
	nameAt, nameEnd, valueAt, valueEnd int
}

// headers decodes a header block of payload (which d reads) within limits,
// appending where each header lies to spans. Names must be tokens and
// values printable (no CR, LF or NUL), as over HTTP.
func (d *decoder) headers(payload []byte, spans []headerSpan, l Limits) []headerSpan {
	n := d.u8("header count")
	if n > l.HeadersMax {
		d.fail("%d headers, over the limit of %d", n, l.HeadersMax)
		return spans
	}
	total := 0
	for i := 0; i < n && d.err == nil; i++ {
		nameAt := len(payload) - len(d.b) + 1
		name := d.bytes(d.u8("header name length"), "header name")
		valueAt := len(payload) - len(d.b) + 2
		value := d.bytes(d.u16("header value length"), "header value")
		if d.err != nil {
			return spans
		}
		total += len(name) + len(value)
		switch {
		case total > l.HeaderBytesMax:
			d.fail("headers of more than %d bytes", l.HeaderBytesMax)
		case !validName(name):
			d.fail("header name %q is not a token", clip(string(name)))
		case !validValue(value):
			d.fail("header %s holds a control character", name)
		default:
			spans = append(spans, headerSpan{nameAt, nameAt + len(name), valueAt, valueAt + len(value)})
		}
	}
	return spans
}

// header returns the headers spans locates in head, a copy of the
// payload's first bytes: names and values are pieces of head, and every
// value's slice a piece of one array, so that decoding allocates the same
// few times whatever the headers (once per name and value before, issue
// 21). A name is canonicalized as net/http does; one sent canonical, as
// coord's peers send them, is taken as it is.
func header(head string, spans []headerSpan) http.Header {
	h := make(http.Header, len(spans))
	values := make([]string, len(spans))
	for i, sp := range spans {
		key := http.CanonicalHeaderKey(head[sp.nameAt:sp.nameEnd])
		value := head[sp.valueAt:sp.valueEnd]
		if old, ok := h[key]; ok {
			h[key] = append(old, value)
			continue
		}
		values[i] = value
		h[key] = values[i : i+1 : i+1]
	}
	return h
}

func validName(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || c == ':' || c == '(' || c == ')' || c == ',' || c == ';' || c == '"' || c == '/' || c == '\\' || c == '[' || c == ']' || c == '?' || c == '=' || c == '{' || c == '}' || c == '<' || c == '>' || c == '@' {
			return false
		}
	}
	return true
}

func validValue(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true // values may hold any bytes but controls, as over HTTP/1.1
}

// RequestFrame is a decoded request: Body aliases the frame's payload.
type RequestFrame struct {
	Method, Target string
	Header         http.Header
	Body           []byte
}

// DecodeRequest decodes a request frame's payload within l. Errors wrap
// ErrMalformed.
func DecodeRequest(payload []byte, l Limits) (RequestFrame, error) {
	d := decoder{b: payload}
	method := d.bytes(d.u8("method length"), "method")
	targetAt := len(payload) - len(d.b) + 2
	target := d.bytes(d.u16("target length"), "target")
	var spanArray [8]headerSpan // on the stack for up to 8 headers
	spans := d.headers(payload, spanArray[:0], l)
	if d.err != nil {
		return RequestFrame{}, d.err
	}
	if !validName(method) {
		return RequestFrame{}, fmt.Errorf("%w: method %q is not a token", ErrMalformed, clip(string(method)))
	}
	if len(target) == 0 || target[0] != '/' || !validValue(target) || containsSpace(target) {
		return RequestFrame{}, fmt.Errorf("%w: target %q: want an absolute path", ErrMalformed, clip(string(target)))
	}
	// One copy of the method, target and headers, which the strings
	// share.
	head := string(payload[:len(payload)-len(d.b)])
	return RequestFrame{Method: head[1 : 1+len(method)], Target: head[targetAt : targetAt+len(target)],
		Header: header(head, spans), Body: d.b}, nil
}

func containsSpace(b []byte) bool {
	for _, c := range b {
		if c == ' ' || c == '\t' {
			return true
		}
	}
	return false
}

// appendRequest appends a request frame on stream to b.
func appendRequest(b []byte, stream uint32, method, target string, h http.Header, body []byte, l Limits) ([]byte, error) {
	if len(method) > 255 || len(target) > 65535 {
		return nil, fmt.Errorf("apiwire: method or target too long to send (%d, %d bytes)", len(method), len(target))
	}
	start := len(b)
	b = appendFrameHeader(b, FrameRequest, stream, 0)
	b = append(b, byte(len(method)))
	b = append(b, method...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(target)))
	b = append(b, target...)
	b, err := appendHeaders(b, h, RequestHeaders, l.HeadersMax)
	if err != nil {
		return nil, err
	}
	b = append(b, body...)
	length := len(b) - start - frameHeaderBytes
	if length > l.FrameBytesMax {
		return nil, fmt.Errorf("apiwire: request of %d bytes over the frame limit of %d", length, l.FrameBytesMax)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(length))
	return b, nil
}

// appendHead appends a head frame (status and the headers that travel).
func appendHead(b []byte, stream uint32, status int, h http.Header, l Limits) ([]byte, error) {
	start := len(b)
	b = appendFrameHeader(b, FrameHead, stream, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(status))
	b, err := appendHeaders(b, h, ResponseHeaders, l.HeadersMax)
	if err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-frameHeaderBytes))
	return b, nil
}

// decodeHead decodes a head frame's payload.
func decodeHead(payload []byte, l Limits) (int, http.Header, error) {
	d := decoder{b: payload}
	status := d.u16("status")
	var spanArray [8]headerSpan
	spans := d.headers(payload, spanArray[:0], l)
	if d.err == nil && (status < 100 || status > 999) {
		d.fail("status %d", status)
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d bytes after the headers of a head frame", len(d.b))
	}
	if d.err != nil {
		return status, nil, d.err
	}
	return status, header(string(payload), spans), nil
}

// clipBytes bounds what an error quotes of a peer's input: the peer
// chooses it, and the server logs it.
const clipBytes = 128

// clip returns s cut to clipBytes, marked when cut.
func clip(s string) string {
	if len(s) <= clipBytes {
		return s
	}
	return s[:clipBytes] + "..."
}

package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"coord/raft"
)

// ErrMalformed means a frame or message could not be decoded. The
// connection that carried it is closed, with the reason logged.
var ErrMalformed = errors.New("transport/tcp: malformed frame")

// Frame types.
const (
	frameHello         byte = 1 // dialer → acceptor: who I am, whom I want
	frameHelloAck      byte = 2 // acceptor → dialer: accepted, who I am
	frameMessage       byte = 3 // one raft.Message (without snapshot data)
	frameSnapshotBegin byte = 4 // a MsgSnapshotRequest; its data follows in chunks
	frameSnapshotChunk byte = 5 // a piece of the snapshot data; last flag byte first
)

// frameHeaderBytes is the length prefix; frameTrailerBytes the checksum.
const (
	frameHeaderBytes  = 4
	frameTrailerBytes = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendFrame appends one frame: the length of type and payload (uint32,
// big endian), the type byte, the payload, and the CRC-32C of type and
// payload.
func appendFrame(buf []byte, typ byte, payload []byte) []byte {
	buf = binary.BigEndian.AppendUint32(buf, uint32(1+len(payload)))
	start := len(buf)
	buf = append(buf, typ)
	buf = append(buf, payload...)
	return binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf[start:], castagnoli))
}

// readFrame reads one frame of at most maxBytes (type and payload). The
// payload is a fresh slice.
func readFrame(r io.Reader, maxBytes int) (typ byte, payload []byte, err error) {
	var head [frameHeaderBytes]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n == 0 || uint64(n) > uint64(maxBytes) {
		return 0, nil, fmt.Errorf("%w: frame length %d out of range (1, %d]", ErrMalformed, n, maxBytes)
	}
	body := make([]byte, int(n)+frameTrailerBytes)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	data, sum := body[:n], binary.BigEndian.Uint32(body[n:])
	if crc32.Checksum(data, castagnoli) != sum {
		return 0, nil, fmt.Errorf("%w: checksum mismatch", ErrMalformed)
	}
	return data[0], data[1:], nil
}

// hello is the first frame each side sends.
type hello struct {
	Version uint64
	From    uint64
	To      uint64
	// Meta is opaque to the transport: the server puts its HTTP address
	// there, so that peers can forward requests to it.
	Meta string
}

// protocolVersion is the transport protocol a hello announces.
const protocolVersion = 1

// helloMagic opens every hello, so that a stray client (an HTTP request to
// the wrong port) is refused on its first bytes with a clear reason.
const helloMagic = "coordtp"

func (h hello) marshal() []byte {
	e := encoder{}
	e.buf = append(e.buf, helloMagic...)
	e.uvarint(h.Version)
	e.uvarint(h.From)
	e.uvarint(h.To)
	e.string(h.Meta)
	return e.buf
}

func unmarshalHello(b []byte) (hello, error) {
	if len(b) < len(helloMagic) || string(b[:len(helloMagic)]) != helloMagic {
		return hello{}, fmt.Errorf("%w: hello: bad magic", ErrMalformed)
	}
	d := decoder{buf: b[len(helloMagic):]}
	h := hello{Version: d.uvarint("version"), From: d.uvarint("from"), To: d.uvarint("to"), Meta: d.string("meta", 4096)}
	return h, d.done("hello")
}

// Limits of decoding, whatever the frame size: a corrupt count must not
// make the decoder allocate without bound.
const (
	maxEntriesPerMessage = 1 << 20
	maxMembers           = 1 << 16
)

// marshalMessage encodes m, without m.Snapshot.Data (snapshot data travels
// in chunks).
func marshalMessage(m raft.Message) []byte {
	size := 64
	for _, e := range m.Entries {
		size += 24 + len(e.Data)
	}
	e := encoder{buf: make([]byte, 0, size)}
	e.byte(byte(m.Type))
	e.uvarint(m.From)
	e.uvarint(m.To)
	e.uvarint(m.Term)
	e.uvarint(m.LogIndex)
	e.uvarint(m.LogTerm)
	e.uvarint(m.Commit)
	e.bool(m.Reject)
	e.uvarint(m.HintIndex)
	e.uvarint(m.HintTerm)
	e.uvarint(m.ReadRound)
	e.bool(m.Transfer)
	e.uvarint(uint64(len(m.Entries)))
	for _, ent := range m.Entries {
		e.uvarint(ent.Term)
		e.uvarint(ent.Index)
		e.byte(byte(ent.Type))
		e.bytes(ent.Data)
	}
	md := m.Snapshot.Metadata
	e.uvarint(md.Index)
	e.uvarint(md.Term)
	for _, ids := range [][]uint64{md.ConfState.Voters, md.ConfState.Learners, md.ConfState.VotersOutgoing} {
		e.uvarint(uint64(len(ids)))
		for _, id := range ids {
			e.uvarint(id)
		}
	}
	return e.buf
}

// unmarshalMessage decodes what marshalMessage encoded, and checks what a
// correct peer always sends: a known type, a sender, no unused entry types.
func unmarshalMessage(b []byte) (raft.Message, error) {
	d := decoder{buf: b}
	var m raft.Message
	m.Type = raft.MessageType(d.byte("type"))
	m.From = d.uvarint("from")
	m.To = d.uvarint("to")
	m.Term = d.uvarint("term")
	m.LogIndex = d.uvarint("log index")
	m.LogTerm = d.uvarint("log term")
	m.Commit = d.uvarint("commit")
	m.Reject = d.bool("reject")
	m.HintIndex = d.uvarint("hint index")
	m.HintTerm = d.uvarint("hint term")
	m.ReadRound = d.uvarint("read round")
	m.Transfer = d.bool("transfer")
	if n := d.count("entries", maxEntriesPerMessage); n > 0 {
		m.Entries = make([]raft.Entry, 0, min(n, len(d.buf)/3+1))
		for range n {
			ent := raft.Entry{Term: d.uvarint("entry term"), Index: d.uvarint("entry index")}
			ent.Type = raft.EntryType(d.byte("entry type"))
			ent.Data = d.bytes("entry data")
			if d.err == nil && ent.Type != raft.EntryNormal && ent.Type != raft.EntryConfChange {
				d.fail(fmt.Sprintf("entry type %d", ent.Type))
			}
			if d.err != nil {
				break
			}
			m.Entries = append(m.Entries, ent)
		}
	}
	md := &m.Snapshot.Metadata
	md.Index = d.uvarint("snapshot index")
	md.Term = d.uvarint("snapshot term")
	for _, ids := range []*[]uint64{&md.ConfState.Voters, &md.ConfState.Learners, &md.ConfState.VotersOutgoing} {
		n := d.count("members", maxMembers)
		for range n {
			*ids = append(*ids, d.uvarint("member"))
		}
	}
	if err := d.done("message"); err != nil {
		return raft.Message{}, err
	}
	switch {
	case !m.Type.Valid():
		return raft.Message{}, fmt.Errorf("%w: message type %d", ErrMalformed, m.Type)
	case m.From == 0 || m.To == 0:
		return raft.Message{}, fmt.Errorf("%w: message %v without sender or recipient", ErrMalformed, m.Type)
	}
	return m, nil
}

// encoder appends primitive values.
type encoder struct{ buf []byte }

func (e *encoder) byte(b byte)      { e.buf = append(e.buf, b) }
func (e *encoder) uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }
func (e *encoder) bytes(b []byte)   { e.uvarint(uint64(len(b))); e.buf = append(e.buf, b...) }
func (e *encoder) string(s string)  { e.uvarint(uint64(len(s))); e.buf = append(e.buf, s...) }

func (e *encoder) bool(b bool) {
	if b {
		e.byte(1)
	} else {
		e.byte(0)
	}
}

// decoder reads what encoder wrote; the first error sticks.
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

func (d *decoder) bool(what string) bool {
	switch d.byte(what) {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail(what + ": not a boolean")
	return false
}

func (d *decoder) count(what string, max int) int {
	n := d.uvarint(what)
	if d.err == nil && (n > uint64(max) || n > uint64(len(d.buf))) {
		d.fail(fmt.Sprintf("%s: count %d over limit or input", what, n))
		return 0
	}
	return int(n)
}

func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what + " length")
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.fail(fmt.Sprintf("%s: length %d over input", what, n))
		return nil
	}
	if n == 0 {
		return nil
	}
	b := make([]byte, n)
	copy(b, d.buf[:n])
	d.buf = d.buf[n:]
	return b
}

func (d *decoder) string(what string, max int) string {
	b := d.bytes(what)
	if d.err == nil && len(b) > max {
		d.fail(fmt.Sprintf("%s: %d bytes over limit %d", what, len(b), max))
	}
	return string(b)
}

func (d *decoder) done(what string) error {
	if d.err == nil && len(d.buf) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.buf)))
	}
	if d.err != nil {
		return fmt.Errorf("%s: %w", what, d.err)
	}
	return nil
}

// snapshotBegin is the payload of frameSnapshotBegin: the message (without
// data) and the data's total size.
func marshalSnapshotBegin(m raft.Message) []byte {
	e := encoder{}
	e.uvarint(uint64(len(m.Snapshot.Data)))
	e.buf = append(e.buf, marshalMessage(m)...)
	return e.buf
}

func unmarshalSnapshotBegin(b []byte, maxBytes int) (raft.Message, int, error) {
	d := decoder{buf: b}
	size := d.uvarint("snapshot size")
	if d.err != nil {
		return raft.Message{}, 0, d.err
	}
	if size > uint64(maxBytes) {
		return raft.Message{}, 0, fmt.Errorf("%w: snapshot of %d bytes over limit %d", ErrMalformed, size, maxBytes)
	}
	m, err := unmarshalMessage(d.buf)
	if err != nil {
		return raft.Message{}, 0, err
	}
	if m.Type != raft.MsgSnapshotRequest {
		return raft.Message{}, 0, fmt.Errorf("%w: snapshot frame carries %v", ErrMalformed, m.Type)
	}
	return m, int(size), nil
}

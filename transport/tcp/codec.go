package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"

	"coord/internal/wire"
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

// ProtocolVersion is the peer protocol version a hello announces; a peer
// announcing another is refused, with a log line naming both. Version 2
// added the message types 12 to 14 (a follower's read index request and
// its answer, forwarded proposals, which carry commands an older node
// would refuse to apply) and snapshots spooled to disk: an older node and
// a newer one must not form a cluster, where they would part ways, so
// they do not talk at all (docs/cluster.md, "Limits"). Version 3 added
// message type 15 (the leader's answer to forwarded proposals) and the
// message field Lead after Transfer: a version 2 node would refuse the
// type and misread every message.
const ProtocolVersion = 3

// helloMagic opens every hello, so that a stray client (an HTTP request to
// the wrong port) is refused on its first bytes with a clear reason.
const helloMagic = "coordtp"

func (h hello) marshal() []byte {
	e := wire.Encoder{}
	e.Buf = append(e.Buf, helloMagic...)
	e.Uvarint(h.Version)
	e.Uvarint(h.From)
	e.Uvarint(h.To)
	e.String(h.Meta)
	return e.Buf
}

func unmarshalHello(b []byte) (hello, error) {
	if len(b) < len(helloMagic) || string(b[:len(helloMagic)]) != helloMagic {
		return hello{}, fmt.Errorf("%w: hello: bad magic", ErrMalformed)
	}
	d := wire.NewDecoder(b[len(helloMagic):], ErrMalformed)
	h := hello{Version: d.Uvarint("version"), From: d.Uvarint("from"), To: d.Uvarint("to"), Meta: d.String("meta", 4096)}
	return h, done(d, "hello")
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
	return appendMessage(make([]byte, 0, messageSizeHint(m)), m)
}

// messageSizeHint is about the length of m's encoding: enough for its
// fields and entries, so that encoding it grows no buffer.
func messageSizeHint(m raft.Message) int {
	size := 64
	for _, e := range m.Entries {
		size += 24 + len(e.Data)
	}
	return size
}

// appendMessageFrame appends m as one message frame (appendFrame of its
// encoding), encoded in place: the leader's appends, a few a write to each
// follower, then cost no buffer of their own and no copy.
func appendMessageFrame(buf []byte, m raft.Message) []byte {
	buf = slices.Grow(buf, frameHeaderBytes+1+messageSizeHint(m)+frameTrailerBytes)
	start := len(buf)
	buf = append(buf, 0, 0, 0, 0, frameMessage) // the length, filled in below
	buf = appendMessage(buf, m)
	binary.BigEndian.PutUint32(buf[start:], uint32(len(buf)-start-frameHeaderBytes))
	return binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf[start+frameHeaderBytes:], castagnoli))
}

// appendMessage appends the encoding of m, without m.Snapshot.Data.
func appendMessage(buf []byte, m raft.Message) []byte {
	e := wire.Encoder{Buf: buf}
	e.Byte(byte(m.Type))
	e.Uvarint(m.From)
	e.Uvarint(m.To)
	e.Uvarint(m.Term)
	e.Uvarint(m.LogIndex)
	e.Uvarint(m.LogTerm)
	e.Uvarint(m.Commit)
	e.Bool(m.Reject)
	e.Uvarint(m.HintIndex)
	e.Uvarint(m.HintTerm)
	e.Uvarint(m.ReadRound)
	e.Bool(m.Transfer)
	e.Uvarint(m.Lead)
	e.Uvarint(uint64(len(m.Entries)))
	for _, ent := range m.Entries {
		e.Uvarint(ent.Term)
		e.Uvarint(ent.Index)
		e.Byte(byte(ent.Type))
		e.Bytes(ent.Data)
	}
	md := m.Snapshot.Metadata
	e.Uvarint(md.Index)
	e.Uvarint(md.Term)
	for _, ids := range [][]uint64{md.ConfState.Voters, md.ConfState.Learners, md.ConfState.VotersOutgoing} {
		e.Uvarint(uint64(len(ids)))
		for _, id := range ids {
			e.Uvarint(id)
		}
	}
	return e.Buf
}

// unmarshalMessage decodes what marshalMessage encoded, and checks what a
// correct peer always sends: a known type, a sender, no unused entry types.
func unmarshalMessage(b []byte) (raft.Message, error) {
	d := wire.NewDecoder(b, ErrMalformed)
	var m raft.Message
	m.Type = raft.MessageType(d.Byte("type"))
	m.From = d.Uvarint("from")
	m.To = d.Uvarint("to")
	m.Term = d.Uvarint("term")
	m.LogIndex = d.Uvarint("log index")
	m.LogTerm = d.Uvarint("log term")
	m.Commit = d.Uvarint("commit")
	m.Reject = d.Bool("reject")
	m.HintIndex = d.Uvarint("hint index")
	m.HintTerm = d.Uvarint("hint term")
	m.ReadRound = d.Uvarint("read round")
	m.Transfer = d.Bool("transfer")
	m.Lead = d.Uvarint("lead")
	if n := d.Count("entries", maxEntriesPerMessage); n > 0 {
		m.Entries = make([]raft.Entry, 0, min(n, len(d.Rest())/3+1))
		for range n {
			ent := raft.Entry{Term: d.Uvarint("entry term"), Index: d.Uvarint("entry index")}
			ent.Type = raft.EntryType(d.Byte("entry type"))
			ent.Data = d.Bytes("entry data", math.MaxInt)
			if d.Err() == nil && ent.Type != raft.EntryNormal && ent.Type != raft.EntryConfChange {
				d.Fail(fmt.Sprintf("entry type %d", ent.Type))
			}
			if d.Err() != nil {
				break
			}
			m.Entries = append(m.Entries, ent)
		}
	}
	md := &m.Snapshot.Metadata
	md.Index = d.Uvarint("snapshot index")
	md.Term = d.Uvarint("snapshot term")
	for _, ids := range []*[]uint64{&md.ConfState.Voters, &md.ConfState.Learners, &md.ConfState.VotersOutgoing} {
		n := d.Count("members", maxMembers)
		for range n {
			*ids = append(*ids, d.Uvarint("member"))
		}
	}
	if err := done(d, "message"); err != nil {
		return raft.Message{}, err
	}
	switch {
	case !m.Type.Valid():
		return raft.Message{}, fmt.Errorf("%w: message type %d", ErrMalformed, m.Type)
	case m.From == 0 || m.To == 0:
		return raft.Message{}, fmt.Errorf("%w: message %v without sender or recipient", ErrMalformed, m.Type)
	case m.Type == raft.MsgProposalRequest:
		if err := checkProposals(m.Entries); err != nil {
			return raft.Message{}, err
		}
	}
	return m, nil
}

// checkProposals refuses a proposal request that carries no proposals or
// anything but normal entries: a forwarded membership change would skip
// the leader's checks (the core refuses it too, with the other fields).
func checkProposals(entries []raft.Entry) error {
	if len(entries) == 0 {
		return fmt.Errorf("%w: %v without proposals", ErrMalformed, raft.MsgProposalRequest)
	}
	for i, e := range entries {
		if e.Type != raft.EntryNormal {
			return fmt.Errorf("%w: %v: proposal %d is a %v entry", ErrMalformed, raft.MsgProposalRequest, i, e.Type)
		}
	}
	return nil
}

// done returns the decoder's error, or an error for trailing input, naming
// what was decoded.
func done(d *wire.Decoder, what string) error {
	if err := d.Done(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// snapshotBegin is the payload of frameSnapshotBegin: the message (without
// data) and the data's total size.
func marshalSnapshotBegin(m raft.Message, size int64) []byte {
	e := wire.Encoder{}
	e.Uvarint(uint64(size))
	e.Buf = append(e.Buf, marshalMessage(m)...)
	return e.Buf
}

func unmarshalSnapshotBegin(b []byte, maxBytes int64) (raft.Message, int64, error) {
	d := wire.NewDecoder(b, ErrMalformed)
	size := d.Uvarint("snapshot size")
	if d.Err() != nil {
		return raft.Message{}, 0, d.Err()
	}
	// maxBytes 0: no bound but int64's (the spool's disk bounds it).
	if size > math.MaxInt64 || (maxBytes > 0 && size > uint64(maxBytes)) {
		return raft.Message{}, 0, fmt.Errorf("%w: snapshot of %d bytes over limit %d", ErrMalformed, size, maxBytes)
	}
	m, err := unmarshalMessage(d.Rest())
	if err != nil {
		return raft.Message{}, 0, err
	}
	if m.Type != raft.MsgSnapshotRequest {
		return raft.Message{}, 0, fmt.Errorf("%w: snapshot frame carries %v", ErrMalformed, m.Type)
	}
	return m, int64(size), nil
}

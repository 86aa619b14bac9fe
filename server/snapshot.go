package server

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"time"

	"coord/internal/wire"

	"github.com/google/btree"
)

// The snapshot format, all integers uvarint unless said otherwise:
//
//	magic "coordsm2" (8 bytes; "coordsm1" is the same without the tokens)
//	applied index
//	key count, then per key in key order:
//	    key, value (length-prefixed), create revision, revision, version
//	lease count, then per lease in name order:
//	    name, holder, token, ttl (varint ns), renewed, revision
//	session count, then per session in client order:
//	    client, acked, last used, result count, then per result in
//	    sequence order: sequence, status byte, revision, holder (or, for
//	    a failed batch, its key: Result.encode), token, ttl (varint ns),
//	    reason
//	peer count, then per peer in ID order: ID, address
//	tokens ever made (byte 0 or 1), token count, then per token in ID
//	    order: ID, hash (length-prefixed, 32 bytes), role byte, key
//	    prefix, lease prefix, name
//	CRC-32C of everything before it (4 bytes, big endian)
//
// Collections are written sorted so that two replicas with the same state
// write the same bytes.
const snapshotMagic = "coordsm2"

// snapshotMagicV1 opens snapshots written before tokens existed; they
// restore with none.
const snapshotMagicV1 = "coordsm1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SnapshotView is the machine's state at one applied index, taken by
// Machine.SnapshotView in constant time (the key and lease trees are
// cloned copy-on-write; the small tables are copied) and written out by
// WriteTo while the machine goes on applying.
//
// A SnapshotView is immutable, and safe to use from any goroutine.
type SnapshotView struct {
	applied    uint64
	keyBytes   int64
	keys       *btree.BTreeG[kvItem]
	leases     *btree.BTreeG[Lease]
	sessions   []sessionRecord // in client order
	peers      map[uint64]string
	tokensEver bool
	tokens     []Token // in ID order
}

// sessionRecord is a copy of one session for a SnapshotView.
type sessionRecord struct {
	client, acked, lastUsed uint64
	seqs                    []uint64 // in order
	results                 []Result // by seqs
}

// SnapshotView returns a view of the whole state as of the last applied
// entry. It costs the size of the sessions, peers and tokens tables, not
// of the keys or leases: the trees are shared copy-on-write, and the
// machine copies a node only when it next changes it.
func (m *Machine) SnapshotView() *SnapshotView {
	v := &SnapshotView{
		applied:    m.applied,
		keyBytes:   m.keyBytes,
		keys:       m.keys.Clone(),
		leases:     m.leases.Clone(),
		peers:      m.Peers(),
		tokensEver: m.tokensEver,
		tokens:     m.Tokens(),
	}
	for _, id := range sortedKeys(m.sessions) {
		s := m.sessions[id]
		r := sessionRecord{client: id, acked: s.acked, lastUsed: s.lastUsed, seqs: sortedKeys(s.results)}
		for _, seq := range r.seqs {
			r.results = append(r.results, s.results[seq])
		}
		v.sessions = append(v.sessions, r)
	}
	return v
}

// Index returns the applied index the view was taken at.
func (v *SnapshotView) Index() uint64 { return v.applied }

// SizeHint returns about how many bytes WriteTo writes (a little more, as
// a rule), so that a caller that must hold them in one buffer can size it
// once.
func (v *SnapshotView) SizeHint() int64 {
	// Per key: two lengths and three revisions, at most 10 bytes each
	// but rarely more than 4; per lease about as much besides its names.
	return 4096 + v.keyBytes + 20*int64(v.keys.Len()) + 64*int64(v.leases.Len()) + 256*int64(len(v.sessions)+len(v.tokens))
}

// snapshotChunkBytes is how much WriteTo encodes before it hands the bytes
// to the writer.
const snapshotChunkBytes = 256 << 10

// snapshotWriter encodes into a chunk, and hands each full chunk to w,
// checksumming as it goes.
type snapshotWriter struct {
	wire.Encoder
	w       io.Writer
	crc     uint32
	written int64
	err     error
}

// flush hands the chunk to w if it is full, or if all is set.
func (s *snapshotWriter) flush(all bool) {
	if s.err != nil || (len(s.Buf) < snapshotChunkBytes && !all) {
		if s.err != nil {
			s.Buf = s.Buf[:0]
		}
		return
	}
	s.crc = crc32.Update(s.crc, castagnoli, s.Buf)
	n, err := s.w.Write(s.Buf)
	s.written += int64(n)
	s.err = err
	s.Buf = s.Buf[:0]
}

// WriteTo writes the snapshot (the format above) to w, a chunk at a time:
// it never holds more than one chunk and one value in memory. Two views of
// the same state write the same bytes.
func (v *SnapshotView) WriteTo(w io.Writer) (int64, error) {
	s := &snapshotWriter{Encoder: wire.Encoder{Buf: make([]byte, 0, snapshotChunkBytes+4096)}, w: w}
	s.Buf = append(s.Buf, snapshotMagic...)
	s.Uvarint(v.applied)

	s.Uvarint(uint64(v.keys.Len()))
	v.keys.Ascend(func(it kvItem) bool {
		s.String(it.key())
		s.String(it.value())
		s.Uvarint(it.createRevision())
		s.Uvarint(it.revision())
		s.Uvarint(it.version())
		s.flush(false)
		return s.err == nil
	})

	s.Uvarint(uint64(v.leases.Len()))
	v.leases.Ascend(func(l Lease) bool {
		s.String(l.Name)
		s.String(l.Holder)
		s.Uvarint(l.Token)
		s.Varint(int64(l.TTL))
		s.Uvarint(l.Renewed)
		s.Uvarint(l.Revision)
		s.flush(false)
		return s.err == nil
	})

	s.Uvarint(uint64(len(v.sessions)))
	for _, r := range v.sessions {
		s.Uvarint(r.client)
		s.Uvarint(r.acked)
		s.Uvarint(r.lastUsed)
		s.Uvarint(uint64(len(r.seqs)))
		for i, seq := range r.seqs {
			s.Uvarint(seq)
			r.results[i].encode(&s.Encoder)
		}
		s.flush(false)
	}
	s.Uvarint(uint64(len(v.peers)))
	for _, id := range sortedKeys(v.peers) {
		s.Uvarint(id)
		s.String(v.peers[id])
	}
	s.Bool(v.tokensEver)
	s.Uvarint(uint64(len(v.tokens)))
	for _, t := range v.tokens {
		s.Uvarint(t.ID)
		s.Bytes(t.Hash[:])
		s.Byte(byte(t.Role))
		s.String(t.KeyPrefix)
		s.String(t.LeasePrefix)
		s.String(t.Name)
	}
	s.flush(true)
	if s.err == nil {
		var sum [4]byte
		binary.BigEndian.PutUint32(sum[:], s.crc)
		n, err := w.Write(sum[:])
		s.written += int64(n)
		s.err = err
	}
	if s.err != nil {
		return s.written, fmt.Errorf("server: write snapshot: %w", s.err)
	}
	return s.written, nil
}

// Snapshot encodes the whole state, deterministically, into one buffer.
// SnapshotView and WriteTo do the same without holding it in memory, and
// without holding up the machine.
func (m *Machine) Snapshot() []byte {
	v := m.SnapshotView()
	b := bytes.NewBuffer(make([]byte, 0, v.SizeHint()))
	if _, err := v.WriteTo(b); err != nil {
		panic(err) // a bytes.Buffer does not fail
	}
	return b.Bytes()
}

func sortedKeys[K string | uint64, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Restore replaces the machine's whole state with a snapshot's. On error
// (wrapping ErrMalformed) the machine is unchanged.
func (m *Machine) Restore(data []byte) error {
	return m.RestoreFrom(bytes.NewReader(data), int64(len(data)))
}

// RestoreFrom replaces the machine's whole state with the snapshot of size
// bytes that r holds, reading it a chunk at a time. On error the machine is
// unchanged: a damaged snapshot wraps ErrMalformed, and a read error is
// returned as it is. The checksum covers the whole snapshot, so it can only
// be checked at the end: a damaged snapshot is refused then, having cost
// no more memory than the state it claims to hold (every length is checked
// against size first).
func (m *Machine) RestoreFrom(r io.Reader, size int64) error {
	if size < int64(len(snapshotMagic))+4 {
		return fmt.Errorf("%w: snapshot: bad magic", ErrMalformed)
	}
	crc := crc32.New(castagnoli)
	d := wire.NewStreamDecoder(io.TeeReader(io.LimitReader(r, size-4), crc), size-4, ErrMalformed)
	var magic string
	for range len(snapshotMagic) {
		magic += string(d.Byte("magic"))
	}
	if d.Err() == nil && magic != snapshotMagic && magic != snapshotMagicV1 {
		return fmt.Errorf("%w: snapshot: bad magic", ErrMalformed)
	}
	n := NewMachine(m.limits)
	n.applied = d.Uvarint("applied")

	for range d.Count("key count", int(min(d.Left(), maxCount))) {
		key := d.String("key", maxEncodedField)
		value := d.String("value", maxEncodedField)
		createRevision := d.Uvarint("create revision")
		revision := d.Uvarint("revision")
		version := d.Uvarint("version")
		it := newKVItem(key, value, createRevision, revision, version)
		if d.Err() == nil && n.keys.Has(it) {
			d.Fail("key " + key + " twice")
		}
		n.keys.ReplaceOrInsert(it)
		n.keyBytes += it.size()
	}
	for range d.Count("lease count", int(min(d.Left(), maxCount))) {
		l := Lease{Name: d.String("lease name", maxEncodedField)}
		l.Holder = d.String("holder", maxEncodedField)
		l.Token = d.Uvarint("token")
		l.TTL = time.Duration(d.Varint("ttl"))
		l.Renewed = d.Uvarint("renewed")
		l.Revision = d.Uvarint("lease revision")
		if d.Err() == nil && n.leases.Has(l) {
			d.Fail("lease " + l.Name + " twice")
		}
		n.leases.ReplaceOrInsert(l)
	}
	for range d.Count("session count", int(min(d.Left(), maxCount))) {
		id := d.Uvarint("client")
		s := &session{results: map[uint64]Result{}}
		s.acked = d.Uvarint("acked")
		s.lastUsed = d.Uvarint("last used")
		for range d.Count("result count", int(min(d.Left(), maxCount))) {
			seq := d.Uvarint("sequence")
			s.results[seq] = decodeResult(d)
		}
		n.sessions[id] = s
	}
	for range d.Count("peer count", int(min(d.Left(), maxCount))) {
		id := d.Uvarint("peer id")
		n.peers[id] = d.String("peer address", maxEncodedField)
	}
	if magic == snapshotMagic {
		n.restoreTokens(d)
	}
	if err := d.Done(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	var sum [4]byte
	if _, err := io.ReadFull(r, sum[:]); err != nil {
		return fmt.Errorf("%w: snapshot: checksum: %w", ErrMalformed, err) // the read error too: a damaged file's snapshot.ErrCorrupt
	}
	if binary.BigEndian.Uint32(sum[:]) != crc.Sum32() {
		return fmt.Errorf("%w: snapshot: checksum mismatch", ErrMalformed)
	}
	*m = *n
	return nil
}

// maxCount bounds a collection's count as an int on any platform; the
// bytes left bound it far more tightly.
const maxCount = 1 << 40

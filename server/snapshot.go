package server

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"time"

	"coord/internal/wire"
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
//	    sequence order: sequence, status byte, revision, holder, token,
//	    ttl (varint ns), reason
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

// Snapshot encodes the whole state, deterministically.
func (m *Machine) Snapshot() []byte {
	e := wire.Encoder{Buf: make([]byte, 0, 4096)}
	e.Buf = append(e.Buf, snapshotMagic...)
	e.Uvarint(m.applied)

	e.Uvarint(uint64(len(m.keys)))
	for _, k := range sortedKeys(m.keys) {
		kv := m.keys[k]
		e.String(kv.Key)
		e.Bytes(kv.Value)
		e.Uvarint(kv.CreateRevision)
		e.Uvarint(kv.Revision)
		e.Uvarint(kv.Version)
	}

	e.Uvarint(uint64(len(m.leases)))
	for _, n := range sortedKeys(m.leases) {
		l := m.leases[n]
		e.String(l.Name)
		e.String(l.Holder)
		e.Uvarint(l.Token)
		e.Varint(int64(l.TTL))
		e.Uvarint(l.Renewed)
		e.Uvarint(l.Revision)
	}

	e.Uvarint(uint64(len(m.sessions)))
	for _, id := range sortedKeys(m.sessions) {
		s := m.sessions[id]
		e.Uvarint(id)
		e.Uvarint(s.acked)
		e.Uvarint(s.lastUsed)
		e.Uvarint(uint64(len(s.results)))
		for _, seq := range sortedKeys(s.results) {
			e.Uvarint(seq)
			s.results[seq].encode(&e)
		}
	}
	e.Uvarint(uint64(len(m.peers)))
	for _, id := range sortedKeys(m.peers) {
		e.Uvarint(id)
		e.String(m.peers[id])
	}
	e.Bool(m.tokensEver)
	e.Uvarint(uint64(len(m.tokens)))
	for _, id := range sortedKeys(m.tokens) {
		t := m.tokens[id]
		e.Uvarint(t.ID)
		e.Bytes(t.Hash[:])
		e.Byte(byte(t.Role))
		e.String(t.KeyPrefix)
		e.String(t.LeasePrefix)
		e.String(t.Name)
	}
	return binary.BigEndian.AppendUint32(e.Buf, crc32.Checksum(e.Buf, castagnoli))
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
	if len(data) < len(snapshotMagic)+4 {
		return fmt.Errorf("%w: snapshot: bad magic", ErrMalformed)
	}
	magic := string(data[:len(snapshotMagic)])
	if magic != snapshotMagic && magic != snapshotMagicV1 {
		return fmt.Errorf("%w: snapshot: bad magic", ErrMalformed)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return fmt.Errorf("%w: snapshot: checksum mismatch", ErrMalformed)
	}
	d := wire.NewDecoder(body[len(snapshotMagic):], ErrMalformed)
	n := NewMachine(m.limits)
	n.applied = d.Uvarint("applied")

	for range d.Count("key count", len(d.Rest())) {
		kv := &KeyValue{Key: d.String("key", maxEncodedField)}
		kv.Value = d.Bytes("value", maxEncodedField)
		if len(kv.Value) == 0 {
			kv.Value = nil
		}
		kv.CreateRevision = d.Uvarint("create revision")
		kv.Revision = d.Uvarint("revision")
		kv.Version = d.Uvarint("version")
		n.keys[kv.Key] = kv
	}
	for range d.Count("lease count", len(d.Rest())) {
		l := &Lease{Name: d.String("lease name", maxEncodedField)}
		l.Holder = d.String("holder", maxEncodedField)
		l.Token = d.Uvarint("token")
		l.TTL = time.Duration(d.Varint("ttl"))
		l.Renewed = d.Uvarint("renewed")
		l.Revision = d.Uvarint("lease revision")
		n.leases[l.Name] = l
	}
	for range d.Count("session count", len(d.Rest())) {
		id := d.Uvarint("client")
		s := &session{results: map[uint64]Result{}}
		s.acked = d.Uvarint("acked")
		s.lastUsed = d.Uvarint("last used")
		for range d.Count("result count", len(d.Rest())) {
			seq := d.Uvarint("sequence")
			s.results[seq] = decodeResult(d)
		}
		n.sessions[id] = s
	}
	for range d.Count("peer count", len(d.Rest())) {
		id := d.Uvarint("peer id")
		n.peers[id] = d.String("peer address", maxEncodedField)
	}
	if magic == snapshotMagic {
		n.restoreTokens(d)
	}
	if err := d.Done(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	*m = *n
	return nil
}

package server

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"time"
)

// The snapshot format, all integers uvarint unless said otherwise:
//
//	magic "coordsm1" (8 bytes)
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
//	CRC-32C of everything before it (4 bytes, big endian)
//
// Collections are written sorted so that two replicas with the same state
// write the same bytes.
const snapshotMagic = "coordsm1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot encodes the whole state, deterministically.
func (m *Machine) Snapshot() []byte {
	e := encoder{buf: make([]byte, 0, 4096)}
	e.buf = append(e.buf, snapshotMagic...)
	e.uvarint(m.applied)

	e.uvarint(uint64(len(m.keys)))
	for _, k := range sortedKeys(m.keys) {
		kv := m.keys[k]
		e.string(kv.Key)
		e.bytes(kv.Value)
		e.uvarint(kv.CreateRevision)
		e.uvarint(kv.Revision)
		e.uvarint(kv.Version)
	}

	e.uvarint(uint64(len(m.leases)))
	for _, n := range sortedKeys(m.leases) {
		l := m.leases[n]
		e.string(l.Name)
		e.string(l.Holder)
		e.uvarint(l.Token)
		e.varint(int64(l.TTL))
		e.uvarint(l.Renewed)
		e.uvarint(l.Revision)
	}

	e.uvarint(uint64(len(m.sessions)))
	for _, id := range sortedKeys(m.sessions) {
		s := m.sessions[id]
		e.uvarint(id)
		e.uvarint(s.acked)
		e.uvarint(s.lastUsed)
		e.uvarint(uint64(len(s.results)))
		for _, seq := range sortedKeys(s.results) {
			e.uvarint(seq)
			s.results[seq].encode(&e)
		}
	}
	e.uvarint(uint64(len(m.peers)))
	for _, id := range sortedKeys(m.peers) {
		e.uvarint(id)
		e.string(m.peers[id])
	}
	return binary.BigEndian.AppendUint32(e.buf, crc32.Checksum(e.buf, castagnoli))
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
	if len(data) < len(snapshotMagic)+4 || string(data[:len(snapshotMagic)]) != snapshotMagic {
		return fmt.Errorf("%w: snapshot: bad magic", ErrMalformed)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return fmt.Errorf("%w: snapshot: checksum mismatch", ErrMalformed)
	}
	d := decoder{buf: body[len(snapshotMagic):]}
	n := NewMachine(m.limits)
	n.applied = d.uvarint("applied")

	for range d.count("key count", len(d.buf)) {
		kv := &KeyValue{Key: d.string("key", maxEncodedField)}
		kv.Value = d.bytes("value", maxEncodedField)
		if len(kv.Value) == 0 {
			kv.Value = nil
		}
		kv.CreateRevision = d.uvarint("create revision")
		kv.Revision = d.uvarint("revision")
		kv.Version = d.uvarint("version")
		n.keys[kv.Key] = kv
	}
	for range d.count("lease count", len(d.buf)) {
		l := &Lease{Name: d.string("lease name", maxEncodedField)}
		l.Holder = d.string("holder", maxEncodedField)
		l.Token = d.uvarint("token")
		l.TTL = time.Duration(d.varint("ttl"))
		l.Renewed = d.uvarint("renewed")
		l.Revision = d.uvarint("lease revision")
		n.leases[l.Name] = l
	}
	for range d.count("session count", len(d.buf)) {
		id := d.uvarint("client")
		s := &session{results: map[uint64]Result{}}
		s.acked = d.uvarint("acked")
		s.lastUsed = d.uvarint("last used")
		for range d.count("result count", len(d.buf)) {
			seq := d.uvarint("sequence")
			s.results[seq] = decodeResult(&d)
		}
		n.sessions[id] = s
	}
	for range d.count("peer count", len(d.buf)) {
		id := d.uvarint("peer id")
		n.peers[id] = d.string("peer address", maxEncodedField)
	}
	if err := d.done(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	*m = *n
	return nil
}

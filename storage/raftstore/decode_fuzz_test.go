package raftstore

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"coord/storage/vfs"
)

// voteFileOf returns a version 2 VOTE file holding a and, if b is not nil,
// b in the other slot.
func voteFileOf(a voteRecord, b *voteRecord) []byte {
	data := make([]byte, voteFileSize)
	copy(data, encodeVoteSlot(a))
	if b != nil {
		copy(data[voteSlotOffset:], encodeVoteSlot(*b))
	}
	return data
}

// FuzzDecodeVoteFile feeds arbitrary bytes to the VOTE file's decoder, as
// Open reads them from disk: it returns errors wrapping ErrCorrupt, never
// panics; a record it accepts is one of the file's slots (or its version 1
// record), and encodes again to a slot that decodes the same.
func FuzzDecodeVoteFile(f *testing.F) {
	first := voteRecord{vote: vote{term: 3, vote: 2}, flags: voteBeforeLog, commit: 7, sequence: 1}
	second := voteRecord{vote: vote{term: 4, vote: 1}, commit: 9, sequence: 2}
	f.Add(voteFileOf(first, nil))
	both := voteFileOf(first, &second)
	f.Add(both)
	torn := bytes.Clone(both)
	torn[voteSlotOffset+30] ^= 0x08 // the newer slot's term: its CRC fails
	f.Add(torn)
	f.Add(voteFileOf(second, &first)) // slots the other way round
	f.Add(voteFileOf(second, &voteRecord{vote: vote{term: 5}, sequence: 2}))
	f.Add(both[:voteFileSize-1])
	v1 := encodeVoteSlot(first)[:voteSize1] // the length of a version 1 file, a version 2 record: bad version
	f.Add(v1)
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decodeVoteFile(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if st.flags&^voteBeforeLog != 0 {
			t.Fatalf("accepted unknown flags %#x", st.flags)
		}
		if len(data) == voteSize1 {
			if st.slot != voteSlotsLegacy {
				t.Fatalf("a version 1 file decoded into slot %d", st.slot)
			}
			return
		}
		if st.slot != 0 && st.slot != 1 {
			t.Fatalf("slot %d", st.slot)
		}
		slot := data[st.slot*voteSlotOffset:][:voteSlotSize]
		if enc := encodeVoteSlot(st.voteRecord); !bytes.Equal(enc, slot) {
			t.Fatalf("record %+v re-encodes to %x, the file's slot %d holds %x", st.voteRecord, enc, st.slot, slot)
		}
		if again, err := decodeVoteSlot(encodeVoteSlot(st.voteRecord)); err != nil || again != st.voteRecord {
			t.Fatalf("re-decode: %+v (%v), want %+v", again, err, st.voteRecord)
		}
	})
}

// FuzzReadIdentity feeds arbitrary bytes to Open's reader of the IDENTITY
// file: errors wrapping ErrCorrupt, never a panic, and an identity it
// accepts encodes to the same bytes.
func FuzzReadIdentity(f *testing.F) {
	valid := encodeIdentity(Identity{ClusterID: 0xc0ffee, NodeID: 3, Created: time.Unix(1_700_000_000, 5)})
	f.Add(valid)
	f.Add(valid[:identitySize-1])
	f.Add(encodeIdentity(Identity{ClusterID: 1})) // node id 0
	for _, at := range []int{0, 8, 24, 40} {      // magic, version, node id, CRC
		b := bytes.Clone(valid)
		b[at] ^= 0x01
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := vfs.NewMemFS()
		w, err := fsys.Create(identityFile)
		if err == nil {
			_, err = w.Write(data)
		}
		if err = errors.Join(err, w.Close()); err != nil {
			t.Fatal(err)
		}
		id, ok, err := readIdentity(fsys, ".")
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if !ok || id.NodeID == 0 {
			t.Fatalf("accepted %+v (ok %v)", id, ok)
		}
		if enc := encodeIdentity(id); !bytes.Equal(enc, data) {
			t.Fatalf("identity %+v re-encodes to %x, the file holds %x", id, enc, data)
		}
	})
}

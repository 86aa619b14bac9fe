package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"

	"coord/storage/vfs"
)

// The VOTE file holds the newest term and the vote in it. Two formats, told
// apart by the file's size. All integers are little-endian.
//
// Version 2 (written by this build), 8192 bytes: two slots, at offsets 0
// and 4096 (voteSlotOffset), so that each lies in its own 4 KiB block; each
// slot is a 56-byte record followed by zeros:
//
//	"coordVOT", version 2 (4), flags (4), sequence (8), term (8), vote (8),
//	commit (8), CRC-32C of the 48 bytes before it (4), zero (4)
//
// The commit index is a committed index the log held durably when the
// record was written (so at most the log's last durable index, and never
// truncated since: committed entries never are); Open takes the higher of
// it and the log's. It lets a Save of a term and vote alone skip the log's
// sync even when its commit index is newer than the log's last sync.
//
// The valid slot with the higher sequence is the file's content; the other
// holds the record before it, or nothing (zeros) in a new file. A write
// overwrites the slot that does not hold the content, in place (pwrite,
// then fdatasync: the file's size never changes, so no metadata is
// journaled), so a write torn by a crash leaves a slot that fails its CRC
// beside the intact previous record: the file reads as before the write.
// This is TigerBeetle's superblock copies, for one small record.
//
// Version 1 (earlier builds), 40 bytes, one record, replaced atomically
// (tmp, fsync, rename, fsync dir):
//
//	"coordVOT", version 1 (4), flags (4), term (8), vote (8), CRC (4),
//	zero (4)
//
// It is read as is, and replaced by a version 2 file at the first write
// (atomically too: the only write of the VOTE file that syncs the
// directory; a directory without a VOTE file gets its first one the same
// way).
//
// Flag 1 (voteBeforeLog), in both: written before the log held anything
// durable (earlier builds of version 1 wrote 0 and ignore it).
const (
	voteMagic       = "coordVOT"
	voteVersion1    = 1
	voteVersion2    = 2
	voteSize1       = 40
	voteSlotSize    = 56
	voteSlotOffset  = 4096
	voteFileSize    = 2 * voteSlotOffset
	voteSlotsLegacy = -1 // voteFile.slot of a version 1 file, or of none
)

// vote is what the VOTE file holds: the newest term and the vote in it.
type vote struct{ term, vote uint64 }

// voteBeforeLog flags a VOTE file written before the log held anything
// durable: a new node's first Save writes the VOTE file, then the log,
// and a crash between the two leaves this file beside an empty log, which
// is not a lost one. The flag is cleared (the file written again) once the
// log's first sync succeeded.
const voteBeforeLog uint32 = 1

// voteRecord is one record of the VOTE file.
type voteRecord struct {
	vote  vote
	flags uint32
	// commit is a commit index durable in the log with it (version 2;
	// 0 in a version 1 file).
	commit uint64
	// sequence orders the records of a version 2 file: each write's is one
	// more than the last. 0 in a version 1 file.
	sequence uint64
}

// voteFileState is what the Disk knows of its VOTE file.
type voteFileState struct {
	voteRecord
	// slot is the slot (0 or 1) holding the newest record of a version 2
	// file; voteSlotsLegacy for a version 1 file or none, which the next
	// write replaces atomically.
	slot int
	// damaged, if not nil, says why the other slot of a version 2 file
	// holds no valid record though it is not blank: a write torn by a
	// crash, or damage. Open logs it.
	damaged error
	// file is the VOTE file, open for writing in place once the Disk wrote
	// it; nil until then, and after a failed write (it is opened again).
	file vfs.WriteAtFile
}

func encodeVoteSlot(r voteRecord) []byte {
	b := make([]byte, 0, voteSlotSize)
	b = append(b, voteMagic...)
	b = binary.LittleEndian.AppendUint32(b, voteVersion2)
	b = binary.LittleEndian.AppendUint32(b, r.flags)
	b = binary.LittleEndian.AppendUint64(b, r.sequence)
	b = binary.LittleEndian.AppendUint64(b, r.vote.term)
	b = binary.LittleEndian.AppendUint64(b, r.vote.vote)
	b = binary.LittleEndian.AppendUint64(b, r.commit)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return binary.LittleEndian.AppendUint32(b, 0)
}

// decodeVoteSlot decodes a version 2 slot; errors wrap ErrCorrupt.
func decodeVoteSlot(data []byte) (voteRecord, error) {
	if err := checkRecord(data, voteMagic, voteSlotSize, voteVersion2); err != nil {
		return voteRecord{}, err
	}
	r := voteRecord{
		flags:    binary.LittleEndian.Uint32(data[12:]),
		sequence: binary.LittleEndian.Uint64(data[16:]),
		vote:     vote{term: binary.LittleEndian.Uint64(data[24:]), vote: binary.LittleEndian.Uint64(data[32:])},
		commit:   binary.LittleEndian.Uint64(data[40:]),
	}
	return r, checkVoteFlags(r.flags)
}

// decodeVote1 decodes a version 1 file; errors wrap ErrCorrupt.
func decodeVote1(data []byte) (voteRecord, error) {
	if err := checkRecord(data, voteMagic, voteSize1, voteVersion1); err != nil {
		return voteRecord{}, err
	}
	r := voteRecord{
		flags: binary.LittleEndian.Uint32(data[12:]),
		vote:  vote{term: binary.LittleEndian.Uint64(data[16:]), vote: binary.LittleEndian.Uint64(data[24:])},
	}
	return r, checkVoteFlags(r.flags)
}

func checkVoteFlags(flags uint32) error {
	if flags&^voteBeforeLog != 0 {
		return fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, flags)
	}
	return nil
}

// decodeVoteFile decodes a VOTE file of either version: the newest valid
// record, the slot holding it, and why the other slot holds none if it is
// not blank (st.damaged). Errors wrap ErrCorrupt.
func decodeVoteFile(data []byte) (voteFileState, error) {
	switch len(data) {
	case voteSize1:
		r, err := decodeVote1(data)
		return voteFileState{voteRecord: r, slot: voteSlotsLegacy}, err
	case voteFileSize:
	default:
		return voteFileState{}, fmt.Errorf("%w: %d bytes, want %d (or %d, version 1)", ErrCorrupt, len(data), voteFileSize, voteSize1)
	}
	var (
		recs [2]voteRecord
		errs [2]error
	)
	for i := range recs {
		slot := data[i*voteSlotOffset : (i+1)*voteSlotOffset]
		recs[i], errs[i] = decodeVoteSlot(slot[:voteSlotSize])
		if errs[i] == nil && !allZero(slot[voteSlotSize:]) {
			errs[i] = fmt.Errorf("%w: bytes after the record of slot %d are not zero", ErrCorrupt, i)
		}
	}
	if errs[0] != nil && errs[1] != nil {
		return voteFileState{}, fmt.Errorf("no valid slot: slot 0: %w; slot 1: %w", errs[0], errs[1])
	}
	for bad, good := range []int{1, 0} {
		if errs[bad] == nil {
			continue
		}
		// A torn write, or none yet (a blank slot), or damage to the
		// newest record: the three cannot be told apart here, so the
		// other slot's is taken, and a slot that is not blank is said.
		st := voteFileState{voteRecord: recs[good], slot: good}
		if !allZero(data[bad*voteSlotOffset : (bad+1)*voteSlotOffset]) {
			st.damaged = fmt.Errorf("slot %d: %w", bad, errs[bad])
		}
		return st, nil
	}
	newest, older := 0, 1
	if recs[1].sequence > recs[0].sequence {
		newest, older = 1, 0
	}
	// Each write moves to a newer term, or votes in the same one, and has
	// the next sequence: two slots that disagree are not a torn write.
	if n, o := recs[newest], recs[older]; n.sequence == o.sequence || n.vote.term < o.vote.term {
		return voteFileState{}, fmt.Errorf("%w: slot %d (sequence %d, term %d) is newer than slot %d (sequence %d, term %d)",
			ErrCorrupt, newest, n.sequence, n.vote.term, older, o.sequence, o.vote.term)
	}
	return voteFileState{voteRecord: recs[newest], slot: newest}, nil
}

func allZero(b []byte) bool { return !bytes.ContainsFunc(b, func(r rune) bool { return r != 0 }) }

// readVote reads dir's VOTE file; ok is false if there is none.
func readVote(fsys vfs.FS, dir string) (st voteFileState, ok bool, err error) {
	name := filepath.Join(dir, voteFile)
	data, err := vfs.ReadFile(fsys, name)
	if errors.Is(err, fs.ErrNotExist) {
		return voteFileState{slot: voteSlotsLegacy}, false, nil
	}
	if err != nil {
		return voteFileState{}, false, err
	}
	st, err = decodeVoteFile(data)
	if err != nil {
		return voteFileState{}, false, fmt.Errorf("%s: %w", name, err)
	}
	return st, true, nil
}

// writeVote makes v, with flags and commit, the VOTE file's content, durably: one
// write in place and one fdatasync, into the slot that does not hold the
// current content. A version 1 file, or none, is replaced by a version 2
// file atomically (the record in slot 0). On error the file's content is
// what it was, or the new record if the sync made it durable after all;
// the next write goes to the same slot.
func (d *Disk) writeVote(v vote, flags uint32, commit uint64) error {
	st := &d.voteFile
	r := voteRecord{vote: v, flags: flags, commit: commit, sequence: st.sequence + 1}
	if st.slot == voteSlotsLegacy {
		if err := createVoteFile(d.fs, d.dir, r); err != nil {
			return err
		}
		st.voteRecord, st.slot = r, 0
		return nil
	}
	name := filepath.Join(d.dir, voteFile)
	if st.file == nil {
		f, err := d.fs.OpenWriteAt(name)
		if err != nil {
			return fmt.Errorf("open %s: %w", name, err)
		}
		st.file = f
	}
	target := 1 - st.slot
	_, err := st.file.WriteAt(encodeVoteSlot(r), int64(target*voteSlotOffset))
	if err == nil {
		err = st.file.SyncData()
	}
	if err != nil {
		// The page cache may hold the record or not: open the file again
		// for the next write, which rewrites the whole slot.
		err = errors.Join(err, st.file.Close())
		st.file = nil
		return fmt.Errorf("write %s slot %d: %w", name, target, err)
	}
	st.voteRecord, st.slot = r, target
	return nil
}

// createVoteFile replaces dir's VOTE file by a version 2 file holding r in
// slot 0, atomically: write a temporary file at its full size, fsync it,
// rename it over VOTE, fsync dir. From then on the file's size and name
// never change, and its writes sync its data alone.
func createVoteFile(fsys vfs.FS, dir string, r voteRecord) error {
	b := make([]byte, voteFileSize) // slot 1 zeros: no record
	copy(b, encodeVoteSlot(r))
	return writeAtomic(fsys, dir, voteFile, b)
}

// closeVoteFile closes the VOTE file if the Disk has it open.
func (d *Disk) closeVoteFile() error {
	if d.voteFile.file == nil {
		return nil
	}
	err := d.voteFile.file.Close()
	d.voteFile.file = nil
	return err
}

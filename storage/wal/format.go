package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"coord/raft"
)

// Errors.
var (
	// ErrCorrupt means the log's files are damaged in a way a crash cannot
	// explain. The log must not be used until someone looks at it.
	ErrCorrupt = errors.New("wal: corrupt")
	// ErrUnsupported means a segment or record was written by a format this
	// version does not know (a newer version, record type or flag).
	ErrUnsupported = errors.New("wal: unsupported format")
	// ErrTooLarge means an entry does not fit in one record.
	ErrTooLarge = errors.New("wal: record too large")
	// ErrClosed is returned by a WAL after Close.
	ErrClosed = errors.New("wal: closed")
	// ErrMissing means Open, told the log must exist
	// (Options.RequireExisting), found no segment.
	ErrMissing = errors.New("wal: missing")
	// ErrFailed wraps the error that made a WAL unusable: after a failed
	// write or sync, only reopening (recovery) is safe.
	ErrFailed = errors.New("wal: unusable after a failed write")
)

// Format constants (see the package doc).
const (
	segmentMagic      = "coordWAL"
	formatVersion     = 1
	segmentHeaderSize = 32
	recordHeaderSize  = 16

	// MaxRecordBytes bounds a record's payload, so that a damaged length
	// field cannot make a reader allocate gigabytes. An entry carries 17
	// bytes of metadata besides its data.
	MaxRecordBytes = 64 << 20

	entryMetaSize       = 17
	hardStateSize       = 24
	checkpointSize      = 20
	segmentEndSize      = 8
	flagBatchEnd   byte = 1
)

type recordType uint8

const (
	recordEntry      recordType = 1
	recordHardState  recordType = 2
	recordCheckpoint recordType = 3
	recordSegmentEnd recordType = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checkpoint marks a snapshot: the log continues after Index, whose entry had
// Term. SnapshotChecksum identifies the snapshot's file; the WAL only stores
// it.
type Checkpoint struct {
	Index            uint64
	Term             uint64
	SnapshotChecksum uint32
}

// segmentHeader returns the header of segment seq.
func segmentHeader(seq uint64) []byte {
	h := make([]byte, segmentHeaderSize)
	copy(h, segmentMagic)
	binary.LittleEndian.PutUint32(h[8:], formatVersion)
	binary.LittleEndian.PutUint64(h[16:], seq)
	binary.LittleEndian.PutUint32(h[24:], crc32.Checksum(h[:24], castagnoli))
	return h
}

// headerChecksum is the CRC of a record header's first 8 bytes, seeded with
// the record's position.
func headerChecksum(h []byte, seq uint64, offset int64) uint32 {
	var pos [16]byte
	binary.LittleEndian.PutUint64(pos[:8], seq)
	binary.LittleEndian.PutUint64(pos[8:], uint64(offset))
	return crc32.Update(crc32.Checksum(h[:8], castagnoli), castagnoli, pos[:])
}

// batch encodes the records of one batch for a segment position.
type batch struct {
	buf        []byte
	seq        uint64
	base       int64 // segment offset of buf[0]
	lastHeader int   // position in buf of the last record's header; -1 if none
}

func newBatch(buf []byte, seq uint64, base int64) *batch {
	return &batch{buf: buf[:0], seq: seq, base: base, lastHeader: -1}
}

// record appends a record whose payload the function appends.
func (b *batch) record(typ recordType, payload func([]byte) []byte) {
	start := len(b.buf)
	b.buf = append(b.buf, make([]byte, recordHeaderSize)...)
	b.buf = payload(b.buf)
	h := b.buf[start : start+recordHeaderSize]
	binary.LittleEndian.PutUint32(h[0:], uint32(len(b.buf)-start-recordHeaderSize))
	h[4] = byte(typ)
	binary.LittleEndian.PutUint32(h[12:], crc32.Checksum(b.buf[start+recordHeaderSize:], castagnoli))
	b.seal(start, 0)
	b.lastHeader = start
}

// seal sets a header's flags and its header CRC.
func (b *batch) seal(start int, flags byte) {
	h := b.buf[start : start+recordHeaderSize]
	h[5] = flags
	binary.LittleEndian.PutUint32(h[8:], headerChecksum(h, b.seq, b.base+int64(start)))
}

// finish marks the last record as the end of the batch and returns the
// encoded bytes.
func (b *batch) finish() []byte {
	if b.lastHeader >= 0 {
		b.seal(b.lastHeader, flagBatchEnd)
	}
	return b.buf
}

func (b *batch) entry(e raft.Entry) {
	b.record(recordEntry, func(p []byte) []byte {
		p = binary.LittleEndian.AppendUint64(p, e.Term)
		p = binary.LittleEndian.AppendUint64(p, e.Index)
		p = append(p, byte(e.Type))
		return append(p, e.Data...)
	})
}

func (b *batch) hardState(hs raft.HardState) {
	b.record(recordHardState, func(p []byte) []byte {
		p = binary.LittleEndian.AppendUint64(p, hs.Term)
		p = binary.LittleEndian.AppendUint64(p, hs.Vote)
		return binary.LittleEndian.AppendUint64(p, hs.Commit)
	})
}

// segmentEnd records that the log continues in segment next.
func (b *batch) segmentEnd(next uint64) {
	b.record(recordSegmentEnd, func(p []byte) []byte { return binary.LittleEndian.AppendUint64(p, next) })
}

func (b *batch) checkpoint(cp Checkpoint) {
	b.record(recordCheckpoint, func(p []byte) []byte {
		p = binary.LittleEndian.AppendUint64(p, cp.Index)
		p = binary.LittleEndian.AppendUint64(p, cp.Term)
		return binary.LittleEndian.AppendUint32(p, cp.SnapshotChecksum)
	})
}

// batchSize returns the encoded size of a batch of hs (if not empty) and
// ents, plus a checkpoint if withCheckpoint.
func batchSize(hs raft.HardState, ents []raft.Entry, withCheckpoint bool) int64 {
	var n int64
	for _, e := range ents {
		n += recordHeaderSize + entryMetaSize + int64(len(e.Data))
	}
	if !hs.IsEmpty() {
		n += recordHeaderSize + hardStateSize
	}
	if withCheckpoint {
		n += recordHeaderSize + checkpointSize
	}
	return n
}

// record is one decoded record; payload aliases the segment's bytes.
type record struct {
	typ     recordType
	offset  int64
	payload []byte
}

// scan is what parseSegment found in a segment.
type scan struct {
	// records holds the records of the complete batches, in order.
	records []record
	// end is the length of the valid prefix: the header and the complete
	// batches. 0 if the header itself is torn.
	end int64
	// torn reports that the bytes from end on are a torn write (last
	// segment only).
	torn bool
	// reason says what was wrong with the torn tail, for the log.
	reason string
	// fileBytes is the segment file's length, zero tail included.
	fileBytes int64
}

// endsWithSegmentEnd reports whether the segment's last complete record
// says the log continues in the next segment.
func (s scan) endsWithSegmentEnd() bool {
	return len(s.records) > 0 && s.records[len(s.records)-1].typ == recordSegmentEnd
}

// opensWithCheckpoint reports whether the segment's first record is a
// checkpoint, that is, whether replay can start at this segment.
func (s scan) opensWithCheckpoint() bool {
	return len(s.records) > 0 && s.records[0].typ == recordCheckpoint
}

// parseSegment checks and splits the bytes of segment seq. In the last
// segment a damaged tail that no valid record follows is torn, not
// corrupt. Zeros from the end of the last complete batch to the end of the
// file are space allocated ahead of the writes: the end of the log in the
// last segment, and allowed after the end-of-segment record of an earlier
// one. Errors wrap ErrCorrupt or ErrUnsupported.
func parseSegment(data []byte, seq uint64, last bool) (scan, error) {
	s, err := parseRecords(data, seq, last)
	s.fileBytes = int64(len(data))
	return s, err
}

func parseRecords(data []byte, seq uint64, last bool) (scan, error) {
	torn, err := checkSegmentHeader(data, seq, last)
	if err != nil {
		return scan{}, err
	}
	if torn {
		return scan{torn: true, reason: "torn segment header"}, nil
	}
	var s scan
	var pending []record
	batchStart := int64(segmentHeaderSize)
	off := int64(segmentHeaderSize)
	zerosFrom := zeroTailStart(data)
	for off < int64(len(data)) {
		if off >= zerosFrom {
			return s.zeroTail(off, batchStart, len(pending) > 0, last)
		}
		rec, flags, n, bad, err := decodeRecord(data[off:], seq, off)
		if err != nil {
			return scan{}, fmt.Errorf("offset %d: %w", off, err)
		}
		if bad != "" {
			if !last {
				return scan{}, fmt.Errorf("%w: offset %d: %s in a segment that is not the last", ErrCorrupt, off, bad)
			}
			if next, ok := validRecordAfter(data, seq, off+1); ok {
				return scan{}, fmt.Errorf("%w: offset %d: %s, but a valid record follows at offset %d", ErrCorrupt, off, bad, next)
			}
			s.end, s.torn, s.reason = batchStart, true, fmt.Sprintf("%s at offset %d", bad, off)
			return s, nil
		}
		pending = append(pending, rec)
		off += n
		if flags&flagBatchEnd != 0 {
			s.records = append(s.records, pending...)
			pending = pending[:0]
			batchStart = off
		}
	}
	s.end = batchStart
	if len(pending) > 0 {
		if !last {
			return scan{}, fmt.Errorf("%w: segment ends inside a batch that began at offset %d", ErrCorrupt, batchStart)
		}
		s.torn, s.reason = true, fmt.Sprintf("incomplete batch at offset %d", batchStart)
	}
	return s, nil
}

// zeroTail ends a scan at off, where only zeros follow: allocated space
// that no write reached. In the last segment that is the end of the log,
// after a torn batch if one is pending; in an earlier segment it may only
// follow the end-of-segment record.
func (s scan) zeroTail(off, batchStart int64, pending, last bool) (scan, error) {
	s.end = batchStart
	switch {
	case last && pending:
		s.torn, s.reason = true, fmt.Sprintf("incomplete batch at offset %d followed by zeros", batchStart)
	case !last && (pending || !s.endsWithSegmentEnd()):
		return scan{}, fmt.Errorf("%w: offset %d: zeros before the end-of-segment record in a segment that is not the last", ErrCorrupt, off)
	}
	return s, nil
}

// zeroTailStart returns the offset from which data holds only zeros
// (len(data) if its last byte is not zero). It reads 8 bytes at a time: a
// preallocated segment's tail is megabytes of zeros.
func zeroTailStart(data []byte) int64 {
	i := len(data)
	for i >= 8 && binary.LittleEndian.Uint64(data[i-8:i]) == 0 {
		i -= 8
	}
	for i > 0 && data[i-1] == 0 {
		i--
	}
	return int64(i)
}

// checkSegmentHeader validates the header of segment seq. In the last
// segment, a header that is a prefix of the expected one followed by zeros
// (or nothing) is torn, provided no valid record follows.
func checkSegmentHeader(data []byte, seq uint64, last bool) (torn bool, err error) {
	want := segmentHeader(seq)
	if len(data) >= segmentHeaderSize && bytes.Equal(data[:segmentHeaderSize], want) {
		return false, nil
	}
	head := data[:min(len(data), segmentHeaderSize)]
	if last && isTornPrefix(head, want) {
		if next, ok := validRecordAfter(data, seq, segmentHeaderSize); ok {
			return false, fmt.Errorf("%w: torn segment header, but a valid record follows at offset %d", ErrCorrupt, next)
		}
		return true, nil
	}
	switch {
	case len(data) < segmentHeaderSize:
		return false, fmt.Errorf("%w: segment header cut short at %d bytes", ErrCorrupt, len(data))
	case string(data[:8]) != segmentMagic:
		return false, fmt.Errorf("%w: bad magic %q, want %q: not a coord WAL segment", ErrCorrupt, data[:8], segmentMagic)
	}
	switch v := binary.LittleEndian.Uint32(data[8:]); {
	case v == 0:
		return false, fmt.Errorf("%w: segment format version 0", ErrCorrupt)
	case v != formatVersion:
		return false, fmt.Errorf("%w: segment format version %d, this build reads version %d", ErrUnsupported, v, formatVersion)
	}
	if got, want := binary.LittleEndian.Uint32(data[24:]), crc32.Checksum(data[:24], castagnoli); got != want {
		return false, fmt.Errorf("%w: segment header checksum %#08x, want %#08x", ErrCorrupt, got, want)
	}
	if got := binary.LittleEndian.Uint64(data[16:]); got != seq {
		return false, fmt.Errorf("%w: segment header says sequence number %d, file name says %d", ErrCorrupt, got, seq)
	}
	return false, fmt.Errorf("%w: segment header has non-zero reserved bytes", ErrCorrupt)
}

// isTornPrefix reports whether head is a prefix of want followed by zeros.
func isTornPrefix(head, want []byte) bool {
	k := commonPrefix(head, want)
	for _, b := range head[k:] {
		if b != 0 {
			return false
		}
	}
	return true
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// decodeRecord decodes the record at the start of data, at offset off of
// segment seq. It returns the record's size in n. A record that could be a
// torn write (cut short, or failing a checksum) is reported in bad, not as
// an error; err is for a record that is intact but wrong.
func decodeRecord(data []byte, seq uint64, off int64) (rec record, flags byte, n int64, bad string, err error) {
	if len(data) < recordHeaderSize {
		return record{}, 0, 0, "record header cut short", nil
	}
	h := data[:recordHeaderSize]
	if h[4] == 0 {
		// No record has type 0: these are zeros (or damage), whatever
		// the checksum of the position happens to be.
		return record{}, 0, 0, "record of type 0", nil
	}
	if binary.LittleEndian.Uint32(h[8:]) != headerChecksum(h, seq, off) {
		return record{}, 0, 0, "record header checksum mismatch", nil
	}
	length := int64(binary.LittleEndian.Uint32(h[0:]))
	typ, flags := recordType(h[4]), h[5]
	switch {
	case h[6] != 0 || h[7] != 0:
		return record{}, 0, 0, "", fmt.Errorf("%w: record header has non-zero reserved bytes", ErrUnsupported)
	case length > MaxRecordBytes:
		return record{}, 0, 0, "", fmt.Errorf("%w: record length %d exceeds the limit %d", ErrCorrupt, length, MaxRecordBytes)
	case int64(len(data)) < recordHeaderSize+length:
		return record{}, 0, 0, "record cut short", nil
	}
	payload := data[recordHeaderSize : recordHeaderSize+length]
	if binary.LittleEndian.Uint32(h[12:]) != crc32.Checksum(payload, castagnoli) {
		return record{}, 0, 0, "record payload checksum mismatch", nil
	}
	if flags&^flagBatchEnd != 0 {
		return record{}, 0, 0, "", fmt.Errorf("%w: unknown record flags %#02x", ErrUnsupported, flags)
	}
	var want int64
	switch typ {
	case recordEntry:
		if length < entryMetaSize {
			return record{}, 0, 0, "", fmt.Errorf("%w: entry record of %d bytes, want at least %d", ErrCorrupt, length, entryMetaSize)
		}
		want = length
	case recordHardState:
		want = hardStateSize
	case recordCheckpoint:
		want = checkpointSize
	case recordSegmentEnd:
		want = segmentEndSize
	default:
		return record{}, 0, 0, "", fmt.Errorf("%w: unknown record type %d (written by a newer version?)", ErrUnsupported, typ)
	}
	if length != want {
		return record{}, 0, 0, "", fmt.Errorf("%w: record of type %d has %d bytes, want %d", ErrCorrupt, typ, length, want)
	}
	return record{typ: typ, offset: off, payload: payload}, flags, recordHeaderSize + length, "", nil
}

// validRecordAfter looks for a record that passes both checksums at any
// offset from from on. The header checksum is seeded with the position, so
// a match is a record written there, not a coincidence or a copy. A record's
// type byte is never zero, so the search stops where a preallocated zero
// tail begins.
func validRecordAfter(data []byte, seq uint64, from int64) (int64, bool) {
	limit := min(int64(len(data))-recordHeaderSize, zeroTailStart(data)-5)
	for off := from; off <= limit; off++ {
		h := data[off : off+recordHeaderSize]
		if h[4] == 0 || binary.LittleEndian.Uint32(h[8:]) != headerChecksum(h, seq, off) {
			continue
		}
		length := int64(binary.LittleEndian.Uint32(h[0:]))
		if length > MaxRecordBytes || off+recordHeaderSize+length > int64(len(data)) {
			continue
		}
		payload := data[off+recordHeaderSize : off+recordHeaderSize+length]
		if binary.LittleEndian.Uint32(h[12:]) == crc32.Checksum(payload, castagnoli) {
			return off, true
		}
	}
	return 0, false
}

// decodeEntry decodes an entry record's payload; empty data decodes as nil.
// The data is copied, so that the entry does not pin the segment's bytes.
func decodeEntry(p []byte) raft.Entry {
	e := raft.Entry{
		Term:  binary.LittleEndian.Uint64(p[0:]),
		Index: binary.LittleEndian.Uint64(p[8:]),
		Type:  raft.EntryType(p[16]),
	}
	if len(p) > entryMetaSize {
		e.Data = bytes.Clone(p[entryMetaSize:])
	}
	return e
}

func decodeHardState(p []byte) raft.HardState {
	return raft.HardState{
		Term:   binary.LittleEndian.Uint64(p[0:]),
		Vote:   binary.LittleEndian.Uint64(p[8:]),
		Commit: binary.LittleEndian.Uint64(p[16:]),
	}
}

func decodeCheckpoint(p []byte) Checkpoint {
	return Checkpoint{
		Index:            binary.LittleEndian.Uint64(p[0:]),
		Term:             binary.LittleEndian.Uint64(p[8:]),
		SnapshotChecksum: binary.LittleEndian.Uint32(p[16:]),
	}
}

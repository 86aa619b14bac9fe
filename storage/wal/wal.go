package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"

	"coord/internal/assert"
	"coord/raft"
	"coord/storage/vfs"
)

// DefaultSegmentBytes is the segment size bound when Options.SegmentBytes is 0.
const DefaultSegmentBytes = 64 << 20

// MinSegmentBytes is the smallest segment size bound Validate accepts.
const MinSegmentBytes = 512

// Options configures a WAL. The zero value is valid and means the defaults.
type Options struct {
	// SegmentBytes is the size past which a batch goes to a new segment.
	// 0 means DefaultSegmentBytes.
	SegmentBytes int64
	// Logger receives recovery notices: a torn tail truncated, leftover
	// segments removed. nil means slog.Default().
	Logger *slog.Logger
}

// Validate reports an option out of range, naming the field.
func (o Options) Validate() error {
	if o.SegmentBytes != 0 && o.SegmentBytes < MinSegmentBytes {
		return fmt.Errorf("wal: Options.SegmentBytes is %d, want 0 (default) or at least %d", o.SegmentBytes, MinSegmentBytes)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// State is what Open recovered: the latest checkpoint, the latest hard
// state, and the entries after the checkpoint.
type State struct {
	Checkpoint Checkpoint
	HardState  raft.HardState
	// Entries are contiguous, the first at Checkpoint.Index+1.
	Entries []raft.Entry
}

// LastIndex returns the index of the last entry, or the checkpoint's index
// if there are none.
func (s State) LastIndex() uint64 { return s.Checkpoint.Index + uint64(len(s.Entries)) }

// WAL is an open write-ahead log. It is not safe for concurrent use.
type WAL struct {
	fs   vfs.FS
	dir  string
	opts Options

	segments []uint64 // sequence numbers of the live segments, ascending
	file     vfs.File // the last segment, open for appending
	size     int64    // the last segment's size
	dirty    bool     // written since the last sync

	checkpointIndex uint64
	lastIndex       uint64

	err    error // the failure that made the WAL unusable
	closed bool
	buf    []byte // reused for encoding batches
}

// segmentName returns the file name of segment seq.
func segmentName(seq uint64) string { return fmt.Sprintf("%016x.wal", seq) }

// parseSegmentName returns the sequence number in a segment file name.
func parseSegmentName(name string) (uint64, bool) {
	base, ok := strings.CutSuffix(name, ".wal")
	if !ok || len(base) != 16 {
		return 0, false
	}
	seq, err := strconv.ParseUint(base, 16, 64)
	return seq, err == nil && seq > 0
}

func (w *WAL) path(seq uint64) string { return filepath.Join(w.dir, segmentName(seq)) }

// Open opens the WAL in dir, creating dir and a first segment if needed, and
// returns what it recovered. It truncates a torn tail (and logs it) and
// removes segments left over from an interrupted checkpoint. Corruption is
// an error wrapping ErrCorrupt; a newer format, ErrUnsupported.
func Open(fsys vfs.FS, dir string, opts Options) (*WAL, State, error) {
	if err := opts.Validate(); err != nil {
		return nil, State{}, err
	}
	w := &WAL{fs: fsys, dir: dir, opts: opts.withDefaults()}
	state, err := w.recover()
	if err != nil {
		if w.file != nil {
			_ = w.file.Close() // the recovery error is the one to report
		}
		return nil, State{}, fmt.Errorf("wal: open %s: %w", dir, err)
	}
	return w, state, nil
}

func (w *WAL) recover() (State, error) {
	if err := vfs.MkdirAllDurable(w.fs, w.dir); err != nil {
		return State{}, err
	}
	seqs, err := w.listSegments()
	if err != nil {
		return State{}, err
	}
	if len(seqs) == 0 {
		return State{}, w.startSegment(1, nil)
	}

	// Newest first, find where replay starts: the newest segment that opens
	// with a checkpoint, or segment 1.
	scans := make([]scan, len(seqs))
	start := -1
	for i := len(seqs) - 1; i >= 0; i-- {
		data, err := vfs.ReadFile(w.fs, w.path(seqs[i]))
		if err != nil {
			return State{}, err
		}
		s, err := parseSegment(data, seqs[i], i == len(seqs)-1)
		if err != nil {
			return State{}, fmt.Errorf("segment %s: %w", segmentName(seqs[i]), err)
		}
		scans[i] = s
		if s.opensWithCheckpoint() || seqs[i] == 1 {
			start = i
			break
		}
	}
	if start < 0 {
		return State{}, fmt.Errorf("%w: segments before %s are missing and none of %d segments opens with a checkpoint",
			ErrCorrupt, segmentName(seqs[0]), len(seqs))
	}
	for i := start + 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			return State{}, fmt.Errorf("%w: segment %s is missing", ErrCorrupt, segmentName(seqs[i-1]+1))
		}
	}
	if err := w.removeSegments(seqs[:start], "left over from an interrupted checkpoint"); err != nil {
		return State{}, err
	}
	seqs, scans = seqs[start:], scans[start:]

	var state State
	for i, s := range scans {
		if err := state.replay(s.records); err != nil {
			return State{}, fmt.Errorf("segment %s: %w", segmentName(seqs[i]), err)
		}
	}
	w.checkpointIndex, w.lastIndex = state.Checkpoint.Index, state.LastIndex()
	w.segments = seqs[:len(seqs)-1]
	return state, w.openLast(seqs[len(seqs)-1], scans[len(scans)-1])
}

// listSegments returns the sequence numbers of the segment files, ascending.
func (w *WAL) listSegments() ([]uint64, error) {
	names, err := w.fs.List(w.dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, name := range names { // sorted, and the names have a fixed width
		if seq, ok := parseSegmentName(name); ok {
			seqs = append(seqs, seq)
		}
	}
	return seqs, nil
}

// openLast opens the last segment for appending, truncating a torn tail.
func (w *WAL) openLast(seq uint64, s scan) error {
	name := w.path(seq)
	if s.torn && s.end == 0 {
		w.opts.Logger.Warn("wal: recreating segment with a torn header", "segment", name, "reason", s.reason)
		return w.startSegment(seq, nil)
	}
	f, err := w.fs.OpenAppend(name)
	if err != nil {
		return err
	}
	w.segments = append(w.segments, seq)
	w.file, w.size = f, s.end
	if !s.torn {
		return nil
	}
	w.opts.Logger.Warn("wal: truncating torn tail", "segment", name, "offset", s.end, "reason", s.reason)
	if err := f.Truncate(s.end); err != nil {
		return err
	}
	return f.Sync()
}

// replay applies the records of complete batches to the state.
func (s *State) replay(records []record) error {
	for _, rec := range records {
		switch rec.typ {
		case recordCheckpoint:
			if rec.offset != segmentHeaderSize {
				return fmt.Errorf("%w: offset %d: a checkpoint record may only open a segment", ErrCorrupt, rec.offset)
			}
			s.Checkpoint, s.Entries = decodeCheckpoint(rec.payload), nil
		case recordHardState:
			s.HardState = decodeHardState(rec.payload)
		case recordEntry:
			e := decodeEntry(rec.payload)
			if e.Index <= s.Checkpoint.Index || e.Index > s.LastIndex()+1 {
				return fmt.Errorf("%w: offset %d: entry %d does not fit the log (checkpoint %d, last index %d)",
					ErrCorrupt, rec.offset, e.Index, s.Checkpoint.Index, s.LastIndex())
			}
			s.Entries = append(s.Entries[:e.Index-s.Checkpoint.Index-1], e)
		}
	}
	return nil
}

// removeSegments removes the given segments and syncs the directory.
func (w *WAL) removeSegments(seqs []uint64, why string) error {
	if len(seqs) == 0 {
		return nil
	}
	for _, seq := range seqs {
		w.opts.Logger.Info("wal: removing segment", "segment", w.path(seq), "why", why)
		if err := w.fs.Remove(w.path(seq)); err != nil {
			return err
		}
	}
	return w.fs.SyncDir(w.dir)
}

// startSegment creates segment seq durably with body as its first bytes
// after the header, and makes it the last segment.
func (w *WAL) startSegment(seq uint64, body []byte) error {
	f, err := w.fs.Create(w.path(seq))
	if err != nil {
		return err
	}
	w.file, w.size = f, 0
	w.segments = append(w.segments, seq)
	buf := append(segmentHeader(seq), body...)
	if _, err := f.Write(buf); err != nil {
		return err
	}
	w.size = int64(len(buf))
	if err := f.Sync(); err != nil {
		return err
	}
	w.dirty = false
	return w.fs.SyncDir(w.dir)
}

// usable returns the error that stops the WAL from working, if any.
func (w *WAL) usable() error {
	switch {
	case w.closed:
		return ErrClosed
	case w.err != nil:
		return fmt.Errorf("%w: %w", ErrFailed, w.err)
	}
	return nil
}

// fail records the error that makes the WAL unusable and returns it.
func (w *WAL) fail(err error) error {
	w.err = err
	return fmt.Errorf("%w: %w", ErrFailed, err)
}

// checkEntries asserts that ents are contiguous and start at most one past
// the last index and after the checkpoint: anything else is a caller's bug.
// It returns ErrTooLarge for an entry that does not fit in a record.
func checkEntries(ents []raft.Entry, after, last uint64) error {
	if len(ents) == 0 {
		return nil
	}
	first := ents[0].Index
	assert.That(first > after && first <= last+1,
		"wal: first entry %d does not follow the log (checkpoint %d, last index %d)", first, after, last)
	for i, e := range ents {
		assert.That(e.Index == first+uint64(i), "wal: entries not contiguous: %d follows %d", e.Index, first+uint64(i)-1)
		if len(e.Data) > MaxRecordBytes-entryMetaSize {
			return fmt.Errorf("%w: entry %d has %d bytes of data, the limit is %d",
				ErrTooLarge, e.Index, len(e.Data), MaxRecordBytes-entryMetaSize)
		}
	}
	return nil
}

// Append writes one batch: the entries ents (which drop any entries from
// ents[0].Index on) and then hs, unless hs is empty. The batch is durable
// only once Sync returns nil. ents must be contiguous, the first at most one
// past the last index and after the checkpoint (else Append panics).
func (w *WAL) Append(hs raft.HardState, ents []raft.Entry) error {
	if err := w.usable(); err != nil {
		return err
	}
	if err := checkEntries(ents, w.checkpointIndex, w.lastIndex); err != nil {
		return err
	}
	if len(ents) == 0 && hs.IsEmpty() {
		return nil
	}
	if n := batchSize(hs, ents, false); w.size > segmentHeaderSize && w.size+n > w.opts.SegmentBytes {
		if err := w.roll(); err != nil {
			return w.fail(fmt.Errorf("wal: start segment: %w", err))
		}
	}
	b := newBatch(w.buf, w.segments[len(w.segments)-1], w.size)
	for _, e := range ents {
		b.entry(e)
	}
	if !hs.IsEmpty() {
		b.hardState(hs)
	}
	buf := b.finish()
	w.buf = buf
	w.dirty = true
	if _, err := w.file.Write(buf); err != nil {
		return w.fail(fmt.Errorf("wal: write: %w", err))
	}
	w.size += int64(len(buf))
	if len(ents) > 0 {
		w.lastIndex = ents[len(ents)-1].Index
	}
	return nil
}

// roll syncs the last segment and starts the next one. The sync comes first
// so that only the last segment can ever have a torn tail.
func (w *WAL) roll() error {
	if err := w.syncFile(); err != nil {
		return err
	}
	if err := w.file.Close(); err != nil {
		return err
	}
	w.file = nil
	return w.startSegment(w.segments[len(w.segments)-1]+1, nil)
}

func (w *WAL) syncFile() error {
	if !w.dirty {
		return nil
	}
	if err := w.file.Sync(); err != nil {
		return err
	}
	w.dirty = false
	return nil
}

// Sync makes every batch appended so far durable. After a failed Sync the
// WAL is unusable (ErrFailed): reopen it.
func (w *WAL) Sync() error {
	if err := w.usable(); err != nil {
		return err
	}
	if err := w.syncFile(); err != nil {
		return w.fail(fmt.Errorf("wal: sync: %w", err))
	}
	return nil
}

// Checkpoint records that a snapshot covers the log up to cp.Index: it
// starts a new segment holding cp, hs (unless empty) and ents, the entries
// to keep after cp.Index (contiguous, from cp.Index+1), makes it durable,
// then removes every older segment. cp.Index must not be below an earlier
// checkpoint's (else Checkpoint panics).
//
// A crash before the new segment is durable leaves the log as it was; after
// it, the checkpoint holds even if older segments remain (Open removes
// them).
func (w *WAL) Checkpoint(cp Checkpoint, hs raft.HardState, ents []raft.Entry) error {
	if err := w.usable(); err != nil {
		return err
	}
	assert.That(cp.Index >= w.checkpointIndex, "wal: checkpoint at %d is below the checkpoint at %d", cp.Index, w.checkpointIndex)
	if err := checkEntries(ents, cp.Index, cp.Index); err != nil {
		return err
	}
	old := w.segments
	if err := w.syncFile(); err != nil {
		return w.fail(fmt.Errorf("wal: sync: %w", err))
	}
	if err := w.file.Close(); err != nil {
		return w.fail(fmt.Errorf("wal: close segment: %w", err))
	}
	w.file = nil
	seq := old[len(old)-1] + 1
	b := newBatch(w.buf, seq, segmentHeaderSize)
	b.checkpoint(cp)
	if !hs.IsEmpty() {
		b.hardState(hs)
	}
	for _, e := range ents {
		b.entry(e)
	}
	w.buf = b.finish()
	w.segments = nil
	if err := w.startSegment(seq, w.buf); err != nil {
		return w.fail(fmt.Errorf("wal: write checkpoint segment: %w", err))
	}
	w.checkpointIndex, w.lastIndex = cp.Index, cp.Index+uint64(len(ents))
	// The checkpoint is durable. Failing to remove what it replaced leaves
	// the state right; Open retries the removal.
	if err := w.removeSegments(old, "replaced by a checkpoint"); err != nil {
		w.opts.Logger.Warn("wal: removing segments replaced by a checkpoint", "dir", w.dir, "err", err)
	}
	return nil
}

// Close syncs and closes the WAL. It is safe to call more than once.
func (w *WAL) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	if w.file == nil {
		return nil
	}
	var err error
	if w.err == nil {
		err = w.syncFile()
	}
	return errors.Join(err, w.file.Close())
}

package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"encoding/binary"
	"slices"

	"coord/internal/assert"
	"coord/raft"
	"coord/storage/vfs"
)

// DefaultSegmentBytes is the segment size bound when Options.SegmentBytes is 0.
const DefaultSegmentBytes = 64 << 20

// MinSegmentBytes is the smallest segment size bound Validate accepts.
const MinSegmentBytes = 512

// DefaultPreallocateBytes is the allocation step when
// Options.PreallocateBytes is 0.
const DefaultPreallocateBytes = 1 << 20

// Options configures a WAL. The zero value is valid and means the defaults.
type Options struct {
	// SegmentBytes is the size past which a batch goes to a new segment.
	// 0 means DefaultSegmentBytes.
	SegmentBytes int64
	// PreallocateBytes is how much space a segment gets allocated at a
	// time, ahead of the writes (up to SegmentBytes): syncing a write into
	// allocated space need not journal a new file size (fdatasync), which
	// took a quarter off a write and sync on ext4. It is a step, not the whole segment, because
	// Open reads the last segment whole, zero tail included, and space
	// allocated ahead is taken from the node's other files. 0 means
	// DefaultPreallocateBytes; negative turns preallocation off (each
	// write grows the file).
	PreallocateBytes int64
	// Logger receives recovery notices: a torn tail truncated, leftover
	// segments removed. nil means slog.Default().
	Logger *slog.Logger
	// RequireExisting makes Open fail with ErrMissing when dir holds no
	// segment, instead of starting a new log: for a node whose log must
	// exist, because a missing one would be a node that forgot its votes.
	RequireExisting bool
	// Background runs the removal of the segments a checkpoint replaced,
	// so that Checkpoint returns once the checkpoint is durable, without
	// waiting for the old segments (64 MiB each by default) to be
	// unlinked. It may run work on any goroutine, at any later time, or
	// never: work touches only files the WAL no longer uses, and Open
	// removes any that are left. nil runs work on a new goroutine, which
	// Close waits for. (The simulator schedules work as an event, so that
	// a seed replays; tests run it in place.)
	Background func(work func())
}

// Validate reports an option out of range, naming the field.
func (o Options) Validate() error {
	if o.SegmentBytes != 0 && o.SegmentBytes < MinSegmentBytes {
		return fmt.Errorf("wal: Options.SegmentBytes is %d, want 0 (default) or at least %d", o.SegmentBytes, MinSegmentBytes)
	}
	if o.PreallocateBytes > 0 && o.PreallocateBytes < MinSegmentBytes {
		return fmt.Errorf("wal: Options.PreallocateBytes is %d, want 0 (default), negative (off) or at least %d", o.PreallocateBytes, MinSegmentBytes)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.PreallocateBytes == 0 {
		o.PreallocateBytes = DefaultPreallocateBytes
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

	segments  []uint64        // sequence numbers of the live segments, ascending
	file      vfs.WriteAtFile // the last segment, open for writing
	size      int64           // the end of the last segment's records: where the next batch goes
	allocated int64           // the last segment's file length, zero tail included; >= size
	dirty     bool            // written since the last sync

	checkpointIndex uint64
	lastIndex       uint64

	err     error // the failure that made the WAL unusable
	durable durablePoint
	closed  bool
	buf     []byte // reused for encoding batches

	// removals counts the removals of replaced segments running on
	// goroutines of their own (Options.Background nil); Close waits for
	// them.
	removals sync.WaitGroup
}

// reserve makes room in the last segment for writes up to end, allocating
// a step ahead. A disk too full for the step is no error here: the write
// goes on without it and meets the full disk itself, as it would without
// preallocation, and the next write tries to allocate again.
func (w *WAL) reserve(end int64) error {
	if end <= w.allocated {
		return nil
	}
	n, err := w.allocate(w.file, w.allocated, end)
	if err != nil {
		return err
	}
	w.allocated = n
	return nil
}

// allocate allocates f, a segment file of length allocated, a
// preallocation step ahead (within the segment's bound, and at least to
// end), and returns the length the file then has at least: that, or end
// (which the writes then extend it to) when preallocation is off or the
// disk has no space for it. It is the one place the step is computed, for
// a new segment (allocated 0) and for a growing one.
func (w *WAL) allocate(f vfs.WriteAtFile, allocated, end int64) (int64, error) {
	if w.opts.PreallocateBytes < 0 {
		return end, nil
	}
	n := max(end, min(allocated+w.opts.PreallocateBytes, w.opts.SegmentBytes))
	if err := f.Allocate(n); err != nil {
		if vfs.IsNoSpace(err) {
			return end, nil
		}
		return 0, err
	}
	return n, nil
}

// durablePoint is the WAL as of its last successful sync: where Repair
// takes it back to.
type durablePoint struct {
	segments        []uint64
	size            int64 // of the last segment
	checkpointIndex uint64
	lastIndex       uint64
}

// markDurable records that everything written so far is durable.
func (w *WAL) markDurable() {
	w.durable = durablePoint{segments: slices.Clone(w.segments), size: w.size,
		checkpointIndex: w.checkpointIndex, lastIndex: w.lastIndex}
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
	if w.opts.RequireExisting {
		ok, err := vfs.Exists(w.fs, w.dir)
		if err != nil {
			return State{}, err
		}
		if !ok {
			return State{}, fmt.Errorf("%w: the directory does not exist", ErrMissing)
		}
	} else if err := vfs.MkdirAllDurable(w.fs, w.dir); err != nil {
		return State{}, err
	}
	seqs, err := w.listSegments()
	if err != nil {
		return State{}, err
	}
	if len(seqs) == 0 {
		if w.opts.RequireExisting {
			return State{}, fmt.Errorf("%w: no segment in the directory", ErrMissing)
		}
		if err := w.startSegment(1, nil); err != nil {
			return State{}, err
		}
		w.markDurable()
		return State{}, nil
	}
	scanned := segmentScans{}
	if seqs, err = w.dropInterruptedRoll(seqs, scanned); err != nil {
		return State{}, err
	}

	// Newest first, find where replay starts: the newest segment that opens
	// with a checkpoint, or segment 1.
	scans := make([]scan, len(seqs))
	start := -1
	for i := len(seqs) - 1; i >= 0; i-- {
		s, err := w.scanSegment(scanned, seqs[i], i == len(seqs)-1)
		if err != nil {
			return State{}, err
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
		if err := checkSegmentEnd(s, seqs[i], i == len(scans)-1); err != nil {
			return State{}, fmt.Errorf("segment %s: %w", segmentName(seqs[i]), err)
		}
		if err := state.replay(s.records); err != nil {
			return State{}, fmt.Errorf("segment %s: %w", segmentName(seqs[i]), err)
		}
	}
	w.checkpointIndex, w.lastIndex = state.Checkpoint.Index, state.LastIndex()
	w.segments = seqs[:len(seqs)-1]
	if err := w.openLast(seqs[len(seqs)-1], scans[len(scans)-1]); err != nil {
		return State{}, err
	}
	w.markDurable()
	return state, nil
}

// segmentScans holds the segments Open read and parsed, by sequence number
// and whether each was parsed as the last segment (which may have a torn
// tail), with the parse's error: Open reads each segment once, though
// dropInterruptedRoll looks at the last two before the replay does (and
// parses the one before the last as the last: scanSegment reuses that
// parse where it equals an earlier segment's).
type segmentScans map[segmentRole]scanResult

type segmentRole struct {
	seq  uint64
	last bool
}

type scanResult struct {
	scan scan
	err  error
}

// scanSegment returns segment seq read and parsed (as the last segment if
// last), from scanned if it was already. Errors name the segment.
func (w *WAL) scanSegment(scanned segmentScans, seq uint64, last bool) (scan, error) {
	role := segmentRole{seq, last}
	if r, ok := scanned[role]; ok {
		return r.scan, r.err
	}
	if r, ok := scanned[segmentRole{seq, true}]; ok && !last && r.err == nil && !r.scan.torn && r.scan.endsWithSegmentEnd() {
		// dropInterruptedRoll parsed it as the last segment and found a
		// completed roll: no torn tail, and the end-of-segment record
		// last. Those are the only places where the two parses differ
		// (a torn tail, or zeros not after that record, are corrupt in
		// an earlier segment), so this is what parsing it as an earlier
		// segment would give.
		return r.scan, nil
	}
	var r scanResult
	data, err := vfs.ReadFile(w.fs, w.path(seq))
	if err == nil {
		r.scan, err = parseSegment(data, seq, last)
	}
	if err != nil {
		r.err = fmt.Errorf("segment %s: %w", segmentName(seq), err)
	}
	scanned[role] = r
	return r.scan, r.err
}

// dropInterruptedRoll removes a last segment that a crash left behind in
// the middle of starting it: it holds no complete batch, and the segment
// before it does not end by naming it (the end-of-segment record is
// written, and synced, only once the new segment is durable). The segment
// before is then the last, and a torn tail in it is truncated as usual.
// The segments it reads stay in scanned for the replay; an error reading
// or parsing them is left to the replay to report.
func (w *WAL) dropInterruptedRoll(seqs []uint64, scanned segmentScans) ([]uint64, error) {
	n := len(seqs)
	if n < 2 || seqs[n-2]+1 != seqs[n-1] {
		return seqs, nil
	}
	if s, err := w.scanSegment(scanned, seqs[n-1], true); err != nil || len(s.records) > 0 {
		return seqs, nil
	}
	prev, err := w.scanSegment(scanned, seqs[n-2], true)
	if err != nil || (!prev.torn && prev.endsWithSegmentEnd()) {
		return seqs, nil // a completed roll, or an error the replay reports
	}
	return seqs[:n-1], w.removeSegments(seqs[n-1:], "an empty segment left by a crash while starting it")
}

// checkSegmentEnd checks a segment's end-of-segment record: it may only be
// the segment's last record, and the segment it names must follow. In the
// last segment present, it means the segments after it were lost.
func checkSegmentEnd(s scan, seq uint64, last bool) error {
	for i, rec := range s.records {
		if rec.typ != recordSegmentEnd {
			continue
		}
		next := binary.LittleEndian.Uint64(rec.payload)
		switch {
		case i != len(s.records)-1:
			return fmt.Errorf("%w: offset %d: records follow the end-of-segment record", ErrCorrupt, rec.offset)
		case next != seq+1:
			return fmt.Errorf("%w: offset %d: the end-of-segment record names segment %d, want %d", ErrCorrupt, rec.offset, next, seq+1)
		case last:
			return fmt.Errorf("%w: segment %s is missing: this segment ends by naming it as the next, so acknowledged records were in it",
				ErrCorrupt, segmentName(next))
		}
	}
	return nil
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
	f, err := w.fs.OpenWriteAt(name)
	if err != nil {
		return err
	}
	w.segments = append(w.segments, seq)
	w.file, w.size, w.allocated = f, s.end, s.fileBytes
	if !s.torn {
		// What Open read must be durable before the node counts on it:
		// records a process crash left unsynced in the page cache (a
		// vote-only Save's, a batch whose sync never came) would
		// otherwise pass for synced ones, and a power loss later could
		// take back what the node has since built on them.
		return f.SyncData()
	}
	// Truncated rather than overwritten: a shorter batch written over a
	// torn one would leave the torn one's later records after it, valid
	// where they lie, and the next Open would find them.
	w.opts.Logger.Warn("wal: truncating torn tail", "segment", name, "offset", s.end, "reason", s.reason)
	if err := f.Truncate(s.end); err != nil {
		return err
	}
	w.allocated = s.end
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
		case recordSegmentEnd:
			// Checked by checkSegmentEnd; it changes no state.
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
	return removeFiles(w.fs, w.dir, w.paths(seqs), why, w.opts.Logger)
}

func (w *WAL) paths(seqs []uint64) []string {
	paths := make([]string, len(seqs))
	for i, seq := range seqs {
		paths[i] = w.path(seq)
	}
	return paths
}

// removeFiles removes the segment files at paths and syncs their
// directory. A file already gone is no error: the removal of segments a
// checkpoint replaced runs in the background, and an Open in the same
// process after the WAL was abandoned (a test's crash) may meet it.
func removeFiles(fsys vfs.FS, dir string, paths []string, why string, logger *slog.Logger) error {
	for _, path := range paths {
		logger.Info("wal: removing segment", "segment", path, "why", why)
		if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return fsys.SyncDir(dir)
}

// startSegment creates segment seq durably with body as its first bytes
// after the header, and makes it the last segment.
func (w *WAL) startSegment(seq uint64, body []byte) error {
	f, size, allocated, err := w.createSegment(seq, body)
	if err != nil {
		return err
	}
	w.file, w.size, w.allocated, w.dirty = f, size, allocated, false
	w.segments = append(w.segments, seq)
	return nil
}

// createSegment creates segment seq durably with body as its first bytes
// after the header, its first preallocation step allocated, and returns it
// open for writing, with the end of its records and its allocated length.
// A crash before it is durable leaves no segment, or one whose header is
// torn or followed by zeros only, which Open removes or recreates.
func (w *WAL) createSegment(seq uint64, body []byte) (vfs.WriteAtFile, int64, int64, error) {
	f, err := w.fs.CreateWriteAt(w.path(seq))
	if err != nil {
		return nil, 0, 0, err
	}
	buf := append(segmentHeader(seq), body...)
	size := int64(len(buf))
	allocated, err := w.allocate(f, 0, size)
	if err == nil {
		_, err = f.WriteAt(buf, 0)
	}
	if err == nil {
		err = f.Sync() // a full sync: the file's size and blocks are new
	}
	if err == nil {
		err = w.fs.SyncDir(w.dir)
	}
	if err != nil {
		_ = f.Close() // the write's error is the one to report
		return nil, 0, 0, err
	}
	return f, size, allocated, nil
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
	if !(first > after && first <= last+1) {
		assert.Fail("wal: first entry %d does not follow the log (checkpoint %d, last index %d)", first, after, last)
	}
	for i, e := range ents {
		if e.Index != first+uint64(i) {
			assert.Fail("wal: entries not contiguous: %d follows %d", e.Index, first+uint64(i)-1)
		}
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
	if err := w.reserve(w.size + int64(len(buf))); err != nil {
		return w.fail(fmt.Errorf("wal: allocate: %w", err))
	}
	if _, err := w.file.WriteAt(buf, w.size); err != nil {
		return w.fail(fmt.Errorf("wal: write: %w", err))
	}
	w.size += int64(len(buf))
	if len(ents) > 0 {
		w.lastIndex = ents[len(ents)-1].Index
	}
	return nil
}

// roll starts the next segment: it creates it durably, then ends the last
// one with a record naming it and syncs that. So only the last segment can
// have a torn tail (a crash before the sync leaves the new segment empty,
// and Open removes it), and a lost newest segment is seen as a loss: the
// segment before it names it.
func (w *WAL) roll() error {
	cur := w.segments[len(w.segments)-1]
	f, size, allocated, err := w.createSegment(cur+1, nil)
	if err != nil {
		return err
	}
	b := newBatch(w.buf, cur, w.size)
	b.segmentEnd(cur + 1)
	w.buf = b.finish()
	w.dirty = true
	err = w.reserve(w.size + int64(len(w.buf)))
	if err == nil {
		_, err = w.file.WriteAt(w.buf, w.size)
	}
	if err == nil {
		err = w.file.SyncData()
	}
	if err == nil {
		err = w.file.Close()
	}
	if err != nil {
		_ = f.Close() // Repair removes the new segment
		return err
	}
	// Not a durable point for Repair: the batches this synced were not
	// acknowledged by a Sync, and Repair takes them back out.
	w.file, w.size, w.allocated, w.dirty = f, size, allocated, false
	w.segments = append(w.segments, cur+1)
	return nil
}

// syncFile syncs the last segment's data: fdatasync, which journals the
// file's size only when a write went past the allocated space.
func (w *WAL) syncFile() error {
	if !w.dirty {
		return nil
	}
	if err := w.file.SyncData(); err != nil {
		return err
	}
	w.dirty = false
	return nil
}

// Sync makes every batch appended so far durable. After a failed Sync the
// WAL is unusable (ErrFailed) until Repair or a reopen.
func (w *WAL) Sync() error {
	if err := w.usable(); err != nil {
		return err
	}
	if err := w.syncFile(); err != nil {
		return w.fail(fmt.Errorf("wal: sync: %w", err))
	}
	w.markDurable()
	return nil
}

// Repair makes a WAL that a failed write or sync left unusable (ErrFailed)
// usable again, without reopening it: it takes the log back to its last
// successful sync. What was appended since was never acknowledged (Sync
// did not return nil for it), so it is dropped: segments started since are
// removed, and the last segment is truncated back to its synced size and
// synced, so that no byte whose write failed, or whose page a failed fsync
// may have left unwritten under a cache that says otherwise, stays in the
// log. Appends then continue in that segment. On error the WAL stays
// unusable; Repair may be called again (when the disk has space again,
// say). Repair on a usable WAL does nothing.
func (w *WAL) Repair() error {
	if w.closed {
		return ErrClosed
	}
	if w.err == nil {
		return nil
	}
	if w.file != nil {
		_ = w.file.Close() // it failed already; the repair reopens it
		w.file = nil
	}
	d := w.durable
	last := d.segments[len(d.segments)-1]
	seqs, err := w.listSegments()
	if err != nil {
		return fmt.Errorf("wal: repair: %w", err)
	}
	var started []uint64
	for _, seq := range seqs {
		if seq > last {
			started = append(started, seq)
		}
	}
	if err := w.removeSegments(started, "started by a write that failed"); err != nil {
		return fmt.Errorf("wal: repair: %w", err)
	}
	f, err := w.fs.OpenWriteAt(w.path(last))
	if err != nil {
		return fmt.Errorf("wal: repair: %w", err)
	}
	err = f.Truncate(d.size) // the allocated tail goes too; Append allocates again
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("wal: repair: truncate %s to %d bytes: %w", w.path(last), d.size, err)
	}
	w.file, w.size, w.allocated, w.dirty = f, d.size, d.size, false
	w.segments = slices.Clone(d.segments)
	w.checkpointIndex, w.lastIndex = d.checkpointIndex, d.lastIndex
	w.opts.Logger.Info("wal: repaired after a failed write", "segment", w.path(last), "size", d.size, "last_index", d.lastIndex, "failure", w.err)
	w.err = nil
	return nil
}

// Checkpoint records that a snapshot covers the log up to cp.Index: it
// starts a new segment holding cp, hs (unless empty) and ents, the entries
// to keep after cp.Index (contiguous, from cp.Index+1), makes it durable,
// and returns; every older segment is then removed off the caller's
// goroutine (Options.Background). cp.Index must not be below an earlier
// checkpoint's (else Checkpoint panics).
//
// A crash before the new segment is durable leaves the log as it was; after
// it, the checkpoint holds even if older segments remain (Open removes
// them).
func (w *WAL) Checkpoint(cp Checkpoint, hs raft.HardState, ents []raft.Entry) error {
	if err := w.usable(); err != nil {
		return err
	}
	if cp.Index < w.checkpointIndex {
		assert.Fail("wal: checkpoint at %d is below the checkpoint at %d", cp.Index, w.checkpointIndex)
	}
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
	w.markDurable()
	w.removeReplaced(old)
	return nil
}

// removeReplaced removes the segments seqs, which a durable checkpoint
// replaced, off the caller's goroutine (Options.Background). From now on
// the WAL never opens, lists for its state or removes them (Repair removes
// only segments after its last sync's, Open only runs on a closed WAL), so
// the removal shares nothing with it but the file system. It may be cut
// short by a crash, or fail: the checkpoint holds either way, and Open
// removes what is left ("left over from an interrupted checkpoint").
func (w *WAL) removeReplaced(seqs []uint64) {
	fsys, dir, paths, logger := w.fs, w.dir, w.paths(seqs), w.opts.Logger
	work := func() {
		if err := removeFiles(fsys, dir, paths, "replaced by a checkpoint", logger); err != nil {
			logger.Warn("wal: removing segments replaced by a checkpoint", "dir", dir, "err", err)
		}
	}
	if w.opts.Background != nil {
		w.opts.Background(work)
		return
	}
	w.removals.Go(work)
}

// Close syncs and closes the WAL. It is safe to call more than once.
//
// Close also waits for the removals of replaced segments it started on
// goroutines of their own (Options.Background nil), so that a closed WAL
// leaves no goroutine behind and a reopen does not race them.
func (w *WAL) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	w.removals.Wait()
	if w.file == nil {
		return nil
	}
	var err error
	if w.err == nil {
		err = w.syncFile()
	}
	return errors.Join(err, w.file.Close())
}

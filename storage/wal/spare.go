package wal

import (
	"sync"

	"coord/internal/assert"
	"coord/storage/vfs"
)

// A checkpoint starts a new segment, and most of that work does not depend
// on what the segment will hold: creating the file, allocating its first
// step, writing its header, fsyncing it and its directory (each a journal
// commit on ext4). PrepareSegment does that part ahead, on any goroutine
// (the snapshot's writer, which knows a checkpoint is coming), and leaves
// the result as a spare: the next segment the WAL starts, by a checkpoint
// or a roll, is the spare if it is ready, and the WAL's own goroutine only
// writes the records into space already allocated and fdatasyncs them,
// which journals nothing.
//
// A spare is durable and holds only its header: if the process dies before
// it is used, Open finds an empty last segment that the one before does
// not name, the mark of an interrupted roll, and removes it. A checkpoint
// written into it and cut short by a crash looks the same (its batch is
// incomplete), so the log is as it was, as when a crash interrupts a
// checkpoint that creates its segment.
//
// Sequence numbers are claimed under spareState's lock, so that the WAL's
// goroutine and a preparer never create the same segment: the preparer
// takes nextFree, and the WAL, before it creates a segment itself, moves
// nextFree past it. While the WAL is failed (until Repair) no spare is
// prepared: Repair removes every segment after its last sync, and must not
// race a file being created.

// spareSegment is a segment PrepareSegment creates ahead of its use.
type spareSegment struct {
	seq  uint64
	done chan struct{} // closed once the preparation ended; then:
	// file is the segment, open for writing, its header durable; nil
	// if err.
	file      vfs.WriteAtFile
	allocated int64 // its allocated length
	err       error
}

// spareState is the WAL's spare segment, shared between its goroutine and a
// preparer. Its fields are guarded by mu.
type spareState struct {
	mu sync.Mutex
	// nextFree is the lowest sequence number that no segment or spare
	// has claimed.
	nextFree uint64
	spare    *spareSegment // nil: none, or taken
	// blocked stops preparations while the WAL is failed or closed.
	blocked, closed bool
}

// PrepareSegment creates the next segment the WAL will start (by a
// Checkpoint or by an Append that fills the last one) ahead of its use,
// durably, so that starting it costs the WAL's goroutine only its records'
// write and fdatasync. It is safe to call from any goroutine, concurrently
// with the WAL's other methods; it does nothing if a spare exists already
// or the WAL is failed. A spare never used is removed by Close, or by the
// next Open after a crash. ErrClosed after Close.
func (w *WAL) PrepareSegment() error {
	s := &w.spares
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return ErrClosed
	case s.blocked || s.spare != nil:
		s.mu.Unlock()
		return nil
	}
	sp := &spareSegment{seq: s.nextFree, done: make(chan struct{})}
	s.nextFree++
	s.spare = sp
	s.mu.Unlock()

	// createSegment reads only the WAL's settings: it is safe here.
	f, _, allocated, err := w.createSegment(sp.seq, nil)
	s.mu.Lock()
	sp.file, sp.allocated, sp.err = f, allocated, err
	close(sp.done)
	s.mu.Unlock()
	return err
}

// takeSpare returns the spare if it was prepared as segment seq, once its
// preparation ended; else nil, and seq is the caller's to create: no
// spare will be prepared under its number.
func (w *WAL) takeSpare(seq uint64) *spareSegment {
	s := &w.spares
	s.mu.Lock()
	sp := s.spare
	s.spare = nil
	s.nextFree = max(s.nextFree, seq+1)
	s.mu.Unlock()
	if sp == nil {
		return nil
	}
	<-sp.done
	switch {
	case sp.err != nil:
		return nil // the caller creates it again (CreateWriteAt truncates)
	case sp.seq != seq:
		// A spare is claimed past every segment, and taken by the next
		// segment started: one numbered below seq would be a live one.
		assert.That(sp.seq > seq, "wal: spare segment %d, starting segment %d", sp.seq, seq)
		w.dropSpare(sp)
		return nil
	}
	return sp
}

// dropSpare closes and removes an unused spare (best effort: Open removes
// a leftover one).
func (w *WAL) dropSpare(sp *spareSegment) {
	if sp.file == nil {
		return
	}
	_ = sp.file.Close()
	if err := w.fs.Remove(w.path(sp.seq)); err != nil {
		w.opts.Logger.Warn("wal: removing an unused spare segment", "segment", w.path(sp.seq), "err", err)
	}
}

// blockSpares stops preparations (the WAL failed or is closing) and
// returns the spare there was, once its preparation ended, for the caller
// to drop or leave to Repair's removal.
func (w *WAL) blockSpares(closing bool) *spareSegment {
	s := &w.spares
	s.mu.Lock()
	s.blocked = true
	s.closed = s.closed || closing
	sp := s.spare
	s.spare = nil
	s.mu.Unlock()
	if sp != nil {
		<-sp.done
	}
	return sp
}

// unblockSpares lets preparations go on after a Repair, from the segment
// after last.
func (w *WAL) unblockSpares(last uint64) {
	s := &w.spares
	s.mu.Lock()
	s.blocked = false
	s.nextFree = last + 1
	s.mu.Unlock()
}

// startSegmentFrom makes the spare sp segment sp.seq with body as its first
// records after the header, durably, and returns it as createSegment does.
// The header and the first allocation are durable already: the records
// need an fdatasync only (a full fsync if they outgrow the allocation).
func (w *WAL) startSegmentFrom(sp *spareSegment, body []byte) (vfs.WriteAtFile, int64, int64, error) {
	f, size, allocated := sp.file, int64(segmentHeaderSize), sp.allocated
	if len(body) == 0 {
		return f, size, allocated, nil
	}
	end := size + int64(len(body))
	grew := end > allocated
	var err error
	if grew {
		allocated, err = w.allocate(f, allocated, end)
	}
	if err == nil {
		_, err = f.WriteAt(body, size)
	}
	if err == nil && grew {
		err = f.Sync()
	} else if err == nil {
		err = f.SyncData()
	}
	if err != nil {
		_ = f.Close() // the write's error is the one to report; Repair removes the segment
		return nil, 0, 0, err
	}
	return f, end, allocated, nil
}

// newSegment creates segment seq durably with body as its first records,
// from the spare if one was prepared as seq, else from nothing
// (createSegment).
func (w *WAL) newSegment(seq uint64, body []byte) (vfs.WriteAtFile, int64, int64, error) {
	if sp := w.takeSpare(seq); sp != nil {
		return w.startSegmentFrom(sp, body)
	}
	return w.createSegment(seq, body)
}

package raftstore

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"coord/internal/assert"
	"coord/raft"
	"coord/storage/snapshot"
	"coord/storage/wal"
)

// A snapshot taken in the background is written in two steps, so that the
// node goes on saving entries while the state machine's data streams to
// disk:
//
//  1. WriteSnapshot (any goroutine) streams the data into a snapshot
//     file and makes it durable under its final name. The Disk's lock is
//     held only to note the file, not while it is written, so Save goes
//     on meanwhile. A file so written is not yet the Disk's snapshot: a
//     crash now leaves a file the log does not refer to, which the next
//     Open removes.
//  2. CompactTo (the node's goroutine) writes the log checkpoint that
//     refers to the file, with the entries after its index, and discards
//     the entries up to it: only now is the snapshot the Disk's.
//
// While a file is being written or waits for CompactTo, the removal of
// replaced and temporary snapshot files (after an ApplySnapshot, say)
// leaves it alone.

// pendingSnapshot is a snapshot file WriteSnapshot is writing (written
// false) or has written (its checksum in sum, its data's length in size).
type pendingSnapshot struct {
	written bool
	sum     uint32
	size    int64
}

// WriteSnapshot writes the file of a snapshot with metadata meta, its data
// streamed from data (which writes the state machine as of meta.Index), and
// returns once the file is durable. The file becomes the Disk's snapshot
// only with CompactTo(meta). ErrSnapshotOutOfDate (raft) if the Disk
// already has a snapshot at or past meta.Index.
//
// WriteSnapshot is safe to call from any goroutine while the Disk is in use;
// one snapshot per index may be in progress at a time.
func (d *Disk) WriteSnapshot(meta raft.SnapshotMetadata, data io.WriterTo) error {
	name := snapshot.FileName(meta.Index, meta.Term)
	if err := d.startSnapshot(meta, name); err != nil {
		return err
	}
	w, err := snapshot.Create(d.fs, d.snapDir, meta)
	var sum uint32
	var size int64
	if err == nil {
		if _, err = data.WriteTo(w); err == nil {
			size = w.Size()
			sum, err = w.Commit()
		} else {
			_ = w.Abort() // best effort: Open removes a leftover
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		delete(d.pending, name)
		return fmt.Errorf("raftstore: write snapshot at %d: %w", meta.Index, err)
	}
	d.pending[name] = pendingSnapshot{written: true, sum: sum, size: size}
	return nil
}

func (d *Disk) startSnapshot(meta raft.SnapshotMetadata, name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.writable(); err != nil {
		return err
	}
	if meta.Index <= d.snapMeta.Index {
		return fmt.Errorf("raftstore: write snapshot at index %d, have one at %d: %w",
			meta.Index, d.snapMeta.Index, raft.ErrSnapshotOutOfDate)
	}
	if _, busy := d.pending[name]; busy {
		return fmt.Errorf("raftstore: snapshot %s is already being written", name)
	}
	if d.pending == nil {
		d.pending = map[string]pendingSnapshot{}
	}
	d.pending[name] = pendingSnapshot{}
	return nil
}

// CompactTo makes the file WriteSnapshot wrote for meta the Disk's
// snapshot: it writes a log checkpoint referring to it, with the entries
// after meta.Index, discards the entries up to it, and returns once that is
// durable. ErrSnapshotOutOfDate (raft) if the Disk took a newer snapshot
// meanwhile (one from the leader, say): the file is then removed. The
// caller must have applied, hence committed, the entries up to meta.Index,
// and meta.Term must be the term of the entry there.
func (d *Disk) CompactTo(meta raft.SnapshotMetadata) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.writable(); err != nil {
		return err
	}
	name := snapshot.FileName(meta.Index, meta.Term)
	p, ok := d.pending[name]
	if !ok || !p.written {
		return fmt.Errorf("raftstore: compact to snapshot %s, which WriteSnapshot did not write", name)
	}
	delete(d.pending, name)
	switch {
	case meta.Index <= d.snapMeta.Index:
		d.removeUnused(name)
		return fmt.Errorf("raftstore: compact to index %d, have a snapshot at %d: %w",
			meta.Index, d.snapMeta.Index, raft.ErrSnapshotOutOfDate)
	case meta.Index > d.lastIndex():
		d.removeUnused(name)
		return fmt.Errorf("raftstore: compact to index %d, past the last index %d: %w",
			meta.Index, d.lastIndex(), raft.ErrUnavailable)
	}
	pos := meta.Index - d.firstIndex()
	if term := d.ents[pos].Term; term != meta.Term {
		assert.Fail("raftstore: CompactTo: snapshot at index %d says term %d, the log has term %d there", meta.Index, meta.Term, term)
	}
	keep := d.ents[pos+1:]
	cp := wal.Checkpoint{Index: meta.Index, Term: meta.Term, SnapshotChecksum: p.sum}
	if err := d.wal.Checkpoint(cp, d.hs, keep); err != nil {
		// The file stays: whether the checkpoint reached the disk is
		// unknown. The next install or Open removes it if unused.
		return fmt.Errorf("raftstore: compact: %w", err)
	}
	d.snapMeta = raft.SnapshotMetadata{Index: meta.Index, Term: meta.Term, ConfState: cloneConfState(meta.ConfState)}
	d.snapSum, d.snapSize = p.sum, p.size
	d.ents = cloneEntries(keep) // frees the compacted prefix
	d.dropStaleReceived()
	if err := d.retireSnapshotsExcept(name); err != nil {
		d.logger.Warn("raftstore: removing replaced snapshots", "dir", d.snapDir, "err", err)
	}
	return nil
}

// removeUnused removes a written snapshot file that will not be used.
// Best effort: the next install or Open removes it otherwise.
func (d *Disk) removeUnused(name string) {
	if err := d.fs.Remove(filepath.Join(d.snapDir, name)); err != nil {
		d.logger.Warn("raftstore: removing an unused snapshot", "file", name, "err", err)
	}
}

// inProgress reports whether a snapshot file (or its temporary file) is
// being written, or waits for CompactTo: not to be removed.
func (d *Disk) inProgress(name string) bool {
	if _, ok := d.pending[strings.TrimSuffix(name, ".tmp")]; ok {
		return true
	}
	for _, r := range d.received {
		if r.file == name {
			return true
		}
	}
	return false
}

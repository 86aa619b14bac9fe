package raftstore

import (
	"errors"
	"fmt"
	"path/filepath"

	"coord/raft"
	"coord/storage/snapshot"
)

// A snapshot received from a leader is spooled to the snapshot directory
// as it arrives, never held in memory, and adopted where it lies:
//
//  1. ReceiveSnapshot (the transport's reader goroutine) creates
//     "recv-<n>.tmp" in the snapshot directory and writes the file's
//     header; Spool.Write appends the data as it arrives; Spool.Commit
//     writes the trailer and fsyncs the file, and returns its Source. A
//     failure or Spool.Abort removes the file. Nothing the Disk reads
//     changes.
//  2. The node's core takes the snapshot (or refuses it, if stale) and,
//     if it takes it, ApplySnapshot (the node's goroutine) renames the
//     file to its final name, fsyncs the directory, and writes the log
//     checkpoint that refers to it: only now is it the Disk's snapshot.
//
// A crash before the checkpoint leaves a file the log does not refer to
// (a ".tmp" one, or a renamed one), which the next Open removes: the node
// comes back with its old state, and the leader sends the snapshot again.
// A spooled file the core never takes (a stale snapshot, or one dropped
// on the way to the core) is removed once the Disk's snapshot or commit
// index passes it, and by the next Open.

// receivedSnapshot is a snapshot being spooled (source nil) or spooled
// and waiting for ApplySnapshot.
type receivedSnapshot struct {
	meta   raft.SnapshotMetadata
	file   string // its file's base name in the snapshot directory now
	source *snapshot.Source
}

// Spool is a snapshot received from a leader on its way to the Disk's
// snapshot directory (ReceiveSnapshot). It is not safe for concurrent use,
// but may be used on any goroutine, concurrently with the Disk's methods.
type Spool struct {
	d    *Disk
	w    *snapshot.Writer
	r    *receivedSnapshot
	size int64 // the length the sender announced
	done bool
}

// ReceiveSnapshot starts spooling a snapshot with metadata meta and size
// bytes of data, received from a leader, to a file in the Disk's snapshot
// directory. ErrSnapshotOutOfDate (raft) if the Disk has a snapshot at or
// past meta.Index, or has committed it (the core would refuse it: no need
// to receive it). It is safe to call from any goroutine.
func (d *Disk) ReceiveSnapshot(meta raft.SnapshotMetadata, size int64) (*Spool, error) {
	if size < 0 {
		return nil, fmt.Errorf("raftstore: receive snapshot at %d: size %d", meta.Index, size)
	}
	d.mu.Lock()
	if err := d.writable(); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	d.dropStaleReceived()
	if err := d.staleReceived(meta.Index); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	d.spools++
	r := &receivedSnapshot{meta: cloneMeta(meta), file: fmt.Sprintf("recv-%d.tmp", d.spools)}
	if d.received == nil {
		d.received = map[string]*receivedSnapshot{}
	}
	d.received[r.file] = r
	d.mu.Unlock()

	w, err := snapshot.CreateTemp(d.fs, d.snapDir, meta, r.file)
	if err != nil {
		d.forgetReceived(r)
		return nil, fmt.Errorf("raftstore: receive snapshot at %d: %w", meta.Index, err)
	}
	return &Spool{d: d, w: w, r: r, size: size}, nil
}

// staleReceived returns ErrSnapshotOutOfDate for a received snapshot at
// index that cannot be installed.
func (d *Disk) staleReceived(index uint64) error {
	if index <= d.snapMeta.Index || index <= d.hs.Commit {
		return fmt.Errorf("raftstore: receive snapshot at index %d, have a snapshot at %d and commit index %d: %w",
			index, d.snapMeta.Index, d.hs.Commit, raft.ErrSnapshotOutOfDate)
	}
	return nil
}

// Write appends p to the snapshot's data. Writing past the size given to
// ReceiveSnapshot is an error.
func (s *Spool) Write(p []byte) (int, error) {
	if s.done {
		return 0, errors.New("raftstore: spool: write after Commit or Abort")
	}
	if s.w.Size()+int64(len(p)) > s.size {
		return 0, fmt.Errorf("raftstore: spool: snapshot data past the %d bytes announced", s.size)
	}
	return s.w.Write(p)
}

// Commit finishes the file (trailer, fsync) and returns its Source, to be
// delivered in the snapshot message: ApplySnapshot adopts the file when
// it is handed that Source. An error if fewer bytes than announced were
// written, if the write failed (a full disk: the error says so), or if the
// snapshot went stale meanwhile; the file is then removed.
func (s *Spool) Commit() (raft.SnapshotSource, error) {
	if s.done {
		return nil, errors.New("raftstore: spool: Commit after Commit or Abort")
	}
	if s.w.Size() != s.size {
		err := fmt.Errorf("raftstore: spool: snapshot ended after %d of %d bytes", s.w.Size(), s.size)
		return nil, errors.Join(err, s.Abort())
	}
	s.done = true
	sum, err := s.w.Seal()
	if err != nil {
		s.d.forgetReceived(s.r)
		return nil, fmt.Errorf("raftstore: spool snapshot at %d: %w", s.r.meta.Index, err)
	}
	source := snapshot.NewSource(s.d.fs, s.w.TempPath(), s.size, sum)
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.writable(); err != nil {
		d.removeReceived(s.r)
		return nil, err
	}
	if err := d.staleReceived(s.r.meta.Index); err != nil {
		d.removeReceived(s.r)
		return nil, err
	}
	s.r.source = source
	return source, nil
}

// Abort abandons the spool and removes its file. It does nothing after
// Commit or Abort.
func (s *Spool) Abort() error {
	if s.done {
		return nil
	}
	s.done = true
	err := s.w.Abort()
	s.d.forgetReceived(s.r)
	return err
}

// forgetReceived stops tracking r, whose file is gone.
func (d *Disk) forgetReceived(r *receivedSnapshot) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.received, r.file)
}

// removeReceived removes r's file and stops tracking it. Best effort: a
// leftover file is removed by the next install or Open.
func (d *Disk) removeReceived(r *receivedSnapshot) {
	delete(d.received, r.file)
	if err := d.fs.Remove(filepath.Join(d.snapDir, r.file)); err != nil {
		d.logger.Warn("raftstore: removing a received snapshot", "file", r.file, "err", err)
	}
}

// receivedFor returns the spooled snapshot whose Source snap carries, or
// nil.
func (d *Disk) receivedFor(snap raft.Snapshot) *receivedSnapshot {
	src, ok := snap.Source.(*snapshot.Source)
	if !ok {
		return nil
	}
	for _, r := range d.received {
		if r.source == src && r.meta.Index == snap.Metadata.Index && r.meta.Term == snap.Metadata.Term {
			return r
		}
	}
	return nil
}

// adopt makes the spooled snapshot r the Disk's: its file renamed to its
// final name (and the directory fsynced), then the log checkpoint. If the
// checkpoint fails, the file stays tracked under its new name, so that a
// retry finds it.
func (d *Disk) adopt(r *receivedSnapshot, meta raft.SnapshotMetadata, hs raft.HardState) error {
	name := snapshot.FileName(meta.Index, meta.Term)
	if _, busy := d.pending[name]; busy {
		// The node's own snapshot at this index is being written: the core
		// refuses a snapshot at or below its commit index, and the node
		// only snapshots what it applied, so this is a caller's bug.
		return fmt.Errorf("snapshot %s is also being written by this node", name)
	}
	if r.file != name {
		if err := snapshot.Adopt(d.fs, d.snapDir, r.file, name); err != nil {
			return err
		}
		r.file = name
		r.source.SetPath(filepath.Join(d.snapDir, name))
	}
	if err := d.checkpoint(meta, r.source.Checksum(), r.source.Size(), hs, nil, name); err != nil {
		return err
	}
	// checkpoint dropped r (its index is the snapshot's now).
	return nil
}

// dropStaleReceived removes the spooled snapshots that can no longer be
// installed (at or below the snapshot or the commit index). One still
// being written is left to its Commit, which finds it stale.
func (d *Disk) dropStaleReceived() {
	for _, r := range d.received {
		if r.source == nil || d.staleReceived(r.meta.Index) == nil {
			continue
		}
		if r.file == snapshot.FileName(d.snapMeta.Index, d.snapMeta.Term) {
			delete(d.received, r.file) // adopted: it is the snapshot now
			continue
		}
		d.removeReceived(r)
	}
}

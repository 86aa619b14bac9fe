package node

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"coord/raft"
	"coord/storage/vfs"
)

// A snapshot taken in the background (when HandlerConfig.Background is set
// and the state machine is a SnapshotViewer) goes in three steps, so that
// the node never stops replicating and applying for the size of its state:
//
//  1. on the handler's goroutine, at applied index i: the state machine's
//     point-in-time view (SnapshotViewer.SnapshotView, constant or small
//     time) and the snapshot's metadata (i, the term of entry i, the
//     membership as of i);
//  2. in the background: the view encoded, written and fsynced
//     (SnapshotStorage.WriteSnapshot), in chunks, never held whole in
//     memory; or, with a Storage that cannot take a stream, encoded into
//     one buffer;
//  3. back on the handler's goroutine, once it is durable: the log
//     compacted up to i (SnapshotStorage.CompactTo, or Storage.Compact
//     with the buffer), then Hooks.Compacted.
//
// One snapshot is in progress at a time. Everything in step 3 happens on
// the handler's goroutine, between two Readies, so the storage sees the
// compaction in the same order as in the synchronous path; the view taken
// in step 1 is the state at i whatever the machine applied since.

// SnapshotViewer is a StateMachine that can hand over its state for a
// snapshot taken in the background.
type SnapshotViewer interface {
	// SnapshotView returns the state as of the last applied entry, in
	// constant or small time. The view's WriteTo writes what Snapshot
	// would have returned then; it is called on another goroutine while
	// Apply goes on, and must still write the state as of the view.
	SnapshotView() (io.WriterTo, error)
}

// SnapshotStorage is a Storage that takes a snapshot streamed to it in the
// background.
type SnapshotStorage interface {
	// WriteSnapshot writes a snapshot file for meta, its data streamed
	// from data, and returns once it is durable; the file is not yet the
	// storage's snapshot. It is called on a goroutine other than the
	// handler's, concurrently with the storage's other methods.
	// ErrSnapshotOutOfDate (raft) if the storage has a snapshot at or past
	// meta.Index.
	WriteSnapshot(meta raft.SnapshotMetadata, data io.WriterTo) error
	// CompactTo makes the file WriteSnapshot wrote for meta the storage's
	// snapshot and discards the log up to meta.Index, durably.
	// ErrSnapshotOutOfDate (raft) if a newer snapshot was installed
	// meanwhile (the file is then discarded).
	CompactTo(meta raft.SnapshotMetadata) error
}

// Background runs work off the handler's goroutine (HandlerConfig): it
// must call work once, on any goroutine, and then have finish called with
// work's error on the handler's goroutine (Node sends it to its loop; the
// simulator schedules both as a later event). If the handler is stopped
// first, finish may be dropped.
type Background func(work func() error, finish func(error))

// snapshotInBackground starts a snapshot at the applied index, if the
// handler can take one in the background; it reports whether it did.
func (h *Handler) snapshotInBackground() bool {
	viewer, ok := h.sm.(SnapshotViewer)
	if h.background == nil || !ok {
		return false
	}
	meta := raft.SnapshotMetadata{Index: h.applied, Term: h.appliedTerm, ConfState: cloneConf(h.conf)}
	view, err := viewer.SnapshotView()
	if err != nil {
		h.compactFailed(fmt.Errorf("node %d: snapshot view at %d: %w", h.id, meta.Index, err))
		return true
	}
	// The view's size is read in step 3: Background orders work before
	// finish.
	counted := &countedView{view: view}
	var work func() error
	var install func() error
	if s, ok := h.storage.(SnapshotStorage); ok {
		work = func() error { return s.WriteSnapshot(meta, counted) }
		install = func() error { return s.CompactTo(meta) }
	} else {
		var buf bytes.Buffer
		work = func() error { _, err := counted.WriteTo(&buf); return err }
		install = func() error { return h.storage.Compact(meta.Index, buf.Bytes(), meta.ConfState) }
	}
	h.snapshotting = true
	h.background(work, func(err error) { h.snapshotWritten(meta, err, install, counted.bytes) })
	return true
}

// countedView is a snapshot view that counts the bytes it wrote.
type countedView struct {
	view  io.WriterTo
	bytes int64
}

func (v *countedView) WriteTo(w io.Writer) (int64, error) {
	n, err := v.view.WriteTo(w)
	v.bytes += n
	return n, err
}

// snapshotWritten is step 3: on the handler's goroutine, once the
// snapshot at meta.Index, of size bytes, is durable (or failed to be).
func (h *Handler) snapshotWritten(meta raft.SnapshotMetadata, err error, install func() error, size int64) {
	h.snapshotting = false
	if h.stopped != nil {
		return
	}
	if err == nil {
		err = install()
	}
	switch {
	case errors.Is(err, raft.ErrSnapshotOutOfDate):
		// A snapshot from the leader overtook this one: nothing to do.
		return
	case err != nil:
		h.compactFailed(fmt.Errorf("node %d: snapshot at %d: %w", h.id, meta.Index, err))
		return
	}
	h.snapshotSizeIs(size)
	h.compacted(meta)
}

// snapshotJitterDivisor bounds the share of logBytesMin drawn for each
// snapshot (SnapshotLogPercent): up to a quarter more.
const snapshotJitterDivisor = 4

// snapshotSizeIs sets the entry data the next snapshot waits for
// (SnapshotLogPercent) from the size of the snapshot just taken or
// installed.
func (h *Handler) snapshotSizeIs(size int64) {
	if h.snapshotPercent == 0 || size <= 0 {
		h.logBytesMin = 0
		return
	}
	base := uint64(size) / 100 * h.snapshotPercent
	if h.rand != nil && base/snapshotJitterDivisor > 0 {
		base += uint64(h.rand.IntN(int(min(base/snapshotJitterDivisor, math.MaxInt32))))
	}
	h.logBytesMin = base
}

// compacted records a durable snapshot and compacted log at meta.
func (h *Handler) compacted(meta raft.SnapshotMetadata) {
	h.compactWait = 0
	h.bytesTaken = 0
	h.lastSnapshot = max(h.lastSnapshot, meta.Index)
	if h.hooks.Compacted != nil {
		h.hooks.Compacted(meta)
	}
}

// compactFailed logs a failed snapshot and backs off before the next: the
// log just grows meanwhile, and nothing is lost.
func (h *Handler) compactFailed(err error) {
	if h.stopped != nil {
		return
	}
	h.bytesSince, h.bytesTaken = h.bytesSince+h.bytesTaken, 0
	h.compactWait = min(max(2*h.compactWait, compactWaitMin), compactWaitMax)
	h.compactAfter = h.ticks + h.compactWait
	h.log.Warn("node: snapshot failed; will retry", "node", h.id, "index", h.applied, "retry_ticks", h.compactWait,
		"err", err, "no_space", vfs.IsNoSpace(err))
}

// Snapshotting reports whether a snapshot is being written in the
// background.
func (h *Handler) Snapshotting() bool { return h.snapshotting }

func cloneConf(cs raft.ConfState) raft.ConfState {
	return raft.ConfState{
		Voters:         slices.Clone(cs.Voters),
		Learners:       slices.Clone(cs.Learners),
		VotersOutgoing: slices.Clone(cs.VotersOutgoing),
	}
}

// StreamRestorer is a StateMachine that restores from a reader, so that a
// snapshot in a file (raft.Snapshot.Source) is decoded as it is read,
// never held whole in memory.
type StreamRestorer interface {
	// RestoreFrom replaces the state with the snapshot of size bytes r
	// holds, as Restore does with a buffer. On error the state is
	// unchanged. A read error (a damaged file) must fail it.
	RestoreFrom(r io.Reader, size int64) error
}

// restore replaces the state machine's state with snap's: streamed from
// snap's Source if it has one and the machine can take a stream, else
// from a buffer (Data, or the Source read whole).
func restore(sm StateMachine, snap raft.Snapshot) error {
	if snap.Source == nil {
		return sm.Restore(snap.Data)
	}
	r, err := snap.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	if sr, ok := sm.(StreamRestorer); ok {
		return sr.RestoreFrom(r, snap.Size())
	}
	data, err := io.ReadAll(io.LimitReader(r, snap.Size()+1))
	switch {
	case err != nil:
		return err
	case int64(len(data)) != snap.Size():
		return fmt.Errorf("snapshot data of %d bytes, its source says %d", len(data), snap.Size())
	}
	return sm.Restore(data)
}

package node

import (
	"fmt"
	"io"

	"coord/raft"
)

// A snapshot from the leader is restored in the background (when
// HandlerConfig.Background is set and the state machine is a
// BackgroundRestorer), so that decoding a large state does not stop the
// node's loop:
//
//  1. on the handler's goroutine, the Ready that carries the snapshot is
//     handled as always up to step 2: the snapshot is durable in the
//     storage (ApplySnapshot) and the messages sent; then, instead of
//     step 3, the decoding starts in the background and the rest of the
//     Ready (its committed entries, reads, role change) is parked, and
//     the core is not advanced;
//  2. in the background: the snapshot read from its source and decoded
//     into a fresh state (BackgroundRestorer.PrepareRestore), the state in
//     use untouched;
//  3. back on the handler's goroutine: the fresh state swapped in, the
//     applied index set to the snapshot's, then the parked rest of the
//     Ready applied and the core advanced, as the synchronous path does.
//
// Nothing past the snapshot is applied before the swap: the entries after
// it reach the handler only in a later Ready, and the core hands out no
// Ready until the outstanding one is advanced (raft.Core.HasReady), which
// is after the swap. Meanwhile the handler goes on stepping messages and
// ticks, so the node keeps hearing its leader (appends land in the core's
// unstable log, bounded by the leader's flow control, and are persisted
// and acknowledged in the first Ready after the swap) and does not time
// out into an election. It takes no snapshot of its own meanwhile. A
// restore that fails (a damaged file: its reader checks the checksum with
// the last bytes) stops the handler with the error, the state machine as
// it was; the snapshot and the log stay in the storage, as after a failed
// synchronous restore. If the handler is stopped first, the decoded state
// is dropped.

// BackgroundRestorer is a StateMachine that can decode a snapshot off the
// handler's goroutine.
type BackgroundRestorer interface {
	// PrepareRestore decodes the snapshot of size bytes r holds into a
	// fresh state, leaving the state in use untouched, on a goroutine
	// other than the handler's, while the handler may go on calling the
	// machine's other methods (but not Apply). It returns install,
	// which the handler calls on its goroutine to make the fresh state
	// the machine's, in small time. A read error (a damaged file) must
	// fail it.
	PrepareRestore(r io.Reader, size int64) (install func(), err error)
}

// restoreInBackground starts decoding rd's snapshot in the background, if
// the handler can; it reports whether it did. rd's persistence and its
// messages are done (steps 1 and 2); restored does the rest.
func (h *Handler) restoreInBackground(rd raft.Ready) bool {
	br, ok := h.sm.(BackgroundRestorer)
	if h.background == nil || !ok {
		return false
	}
	snap := rd.Snapshot
	var install func()
	h.restoring, h.parked = true, rd
	h.background(func() error {
		r, err := snap.Open()
		if err != nil {
			return err
		}
		defer r.Close()
		install, err = br.PrepareRestore(r, snap.Size())
		return err
	}, func(err error) { h.restored(err, install) })
	return true
}

// restored is step 3 of a background restore, on the handler's goroutine.
func (h *Handler) restored(err error, install func()) {
	rd := h.parked
	h.restoring, h.parked = false, raft.Ready{}
	if h.stopped != nil {
		return
	}
	if err != nil {
		h.Stop(fmt.Errorf("node %d: restore snapshot %d: %w", h.id, rd.Snapshot.Metadata.Index, err))
		return
	}
	install()
	h.snapshotRestored(rd.Snapshot)
	if h.stopped != nil {
		return
	}
	// Errors stop the handler; the next Handle returns them. A Ready
	// with a snapshot has no committed entries, so none was applied
	// ahead of its write (applyAhead).
	_ = h.applyAndAdvance(rd, false)
}

// Restoring reports whether a snapshot from the leader is being restored
// in the background.
func (h *Handler) Restoring() bool { return h.restoring }

package tcp

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"coord/raft"
)

// SnapshotSpool takes a snapshot's data as it arrives (Config.SpoolSnapshot).
type SnapshotSpool interface {
	// Write appends the next piece of the data.
	io.Writer
	// Commit is called once all the data arrived intact, and returns where
	// it now is: the delivered message carries it as Snapshot.Source.
	Commit() (raft.SnapshotSource, error)
	// Abort abandons the data (a stream that broke off or was refused),
	// leaving nothing behind.
	Abort() error
}

// MaxSnapshotMemoryBytes bounds a snapshot received into memory, without
// Config.SpoolSnapshot, when Config.MaxSnapshotBytes does not bound it more.
const MaxSnapshotMemoryBytes = 1 << 30

// receiving is a snapshot being received on one connection: its message,
// its size, and where its data goes (a spool, or memory). Once a spool
// fails, the rest of the stream is read and dropped (dropping is set), so
// that the connection and the messages between the chunks go on.
type receiving struct {
	m        raft.Message
	size     int64
	got      int64
	spool    SnapshotSpool // nil: into m.Snapshot.Data
	dropping error         // why the data is being dropped, if it is
	log      *slog.Logger
}

// beginSnapshot checks a snapshot's first frame and starts receiving it.
// An error means the frame is malformed or not this connection's to send:
// the caller closes the connection.
func (t *Transport) beginSnapshot(c *conn, payload []byte) (*receiving, error) {
	limit := t.cfg.MaxSnapshotBytes
	if t.cfg.SpoolSnapshot == nil && (limit == 0 || limit > MaxSnapshotMemoryBytes) {
		limit = MaxSnapshotMemoryBytes
	}
	m, size, err := unmarshalSnapshotBegin(payload, limit)
	if err != nil {
		return nil, err
	}
	if m.From != c.peer.id || m.To != t.cfg.ID {
		return nil, fmt.Errorf("snapshot %d->%d on the connection from node %d to node %d", m.From, m.To, c.peer.id, t.cfg.ID)
	}
	rs := &receiving{m: m, size: size, log: t.log.With("peer", c.peer.id, "index", m.Snapshot.Metadata.Index, "bytes", size)}
	if t.cfg.SpoolSnapshot == nil {
		// Grown as the data arrives: a peer that announces more than it
		// sends does not make this end allocate it.
		rs.m.Snapshot.Data = make([]byte, 0, min(size, 64<<20))
		return rs, nil
	}
	if rs.spool, err = t.cfg.SpoolSnapshot(m, size); err != nil {
		rs.drop(fmt.Errorf("spool: %w", err))
	}
	return rs, nil
}

// drop stops keeping the data, for reason.
func (rs *receiving) drop(reason error) {
	if rs.spool != nil {
		if err := rs.spool.Abort(); err != nil {
			rs.log.Warn("snapshot spool: abort", "err", err)
		}
		rs.spool = nil
	}
	rs.m.Snapshot.Data = nil
	rs.dropping = reason
	if errors.Is(reason, raft.ErrSnapshotOutOfDate) {
		rs.log.Debug("dropping a snapshot received", "reason", reason)
		return
	}
	rs.log.Warn("dropping a snapshot received", "reason", reason)
}

// chunk takes one chunk frame's payload: a flag byte (1 on the last
// chunk, else 0), then data. An error means a malformed stream.
func (rs *receiving) chunk(payload []byte) (last bool, err error) {
	if len(payload) == 0 || payload[0] > 1 {
		return false, fmt.Errorf("%w: snapshot chunk without a flag byte of 0 or 1", ErrMalformed)
	}
	data := payload[1:]
	if int64(len(data)) > rs.size-rs.got {
		return false, fmt.Errorf("%w: snapshot chunk past the %d bytes announced", ErrMalformed, rs.size)
	}
	rs.got += int64(len(data))
	last = payload[0] == 1
	if last && rs.got != rs.size {
		return false, fmt.Errorf("%w: snapshot ended at %d of %d bytes", ErrMalformed, rs.got, rs.size)
	}
	switch {
	case rs.dropping != nil:
	case rs.spool != nil:
		if _, err := rs.spool.Write(data); err != nil {
			rs.drop(fmt.Errorf("spool: write: %w", err))
		}
	default:
		rs.m.Snapshot.Data = append(rs.m.Snapshot.Data, data...)
	}
	return last, nil
}

// finish ends a stream that arrived whole, and returns the message to
// deliver, if any.
func (rs *receiving) finish() (raft.Message, bool) {
	if rs.dropping != nil {
		return raft.Message{}, false
	}
	if rs.spool == nil {
		return rs.m, true
	}
	src, err := rs.spool.Commit()
	rs.spool = nil
	if err != nil {
		rs.drop(fmt.Errorf("spool: commit: %w", err))
		return raft.Message{}, false
	}
	rs.m.Snapshot.Source = src
	return rs.m, true
}

// abort abandons a stream that broke off.
func (rs *receiving) abort() {
	if rs.spool != nil {
		if err := rs.spool.Abort(); err != nil {
			rs.log.Warn("snapshot spool: abort", "err", err)
		}
		rs.spool = nil
	}
}

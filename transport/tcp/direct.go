package tcp

import (
	"net"
	"sync"
	"syscall"
	"time"

	"coord/raft"
)

// sendDirect is Send with direct writes: each peer's messages, in order,
// are written to its socket at once if they can be (writeDirect), and
// queued otherwise.
func (t *Transport) sendDirect(msgs []raft.Message) {
	// A Ready's messages go to a few peers: group them by peer, keeping
	// each peer's order, without a map.
	type batch struct {
		p    *peer
		msgs []raft.Message
	}
	var batchesArray [8]batch
	batches := batchesArray[:0]
next:
	for _, m := range msgs {
		for i := range batches {
			if batches[i].p.id == m.To {
				batches[i].msgs = append(batches[i].msgs, m)
				continue next
			}
		}
		p := t.peer(m.To)
		if p == nil {
			t.drop("unknown peer", m)
			continue
		}
		batches = append(batches, batch{p: p, msgs: []raft.Message{m}})
	}
	for _, b := range batches {
		if !t.writeDirect(b.p, b.msgs) {
			for _, m := range b.msgs {
				t.enqueue(b.p, m)
			}
		}
	}
}

// writeDirect writes msgs to p's connection on the caller's goroutine and
// reports whether it took them (written, or dropped on a write error). It
// does not when another write to p is in progress, messages are queued for
// p, a direct write's bytes still wait for the writer goroutine, there is
// no connection, or the frames are over Config.DirectWriteMaxBytes (or
// carry a snapshot, which streams in chunks): the caller queues them then.
//
// It never waits on the peer: the socket is written without blocking, and
// what it does not take at once is carried, and written by the writer
// goroutine before anything else (sock). A peer that stops reading fills
// the socket buffer; from then on every direct write finds bytes carried,
// and its messages go to the queue, which fills and drops as before.
func (t *Transport) writeDirect(p *peer, msgs []raft.Message) bool {
	if p.pending.Load() != 0 || !p.writing.TryLock() {
		return false
	}
	defer p.writing.Unlock()
	// Under the lock: the writer decrements pending only once it has
	// written what it took, and holds the lock while it writes. A
	// connection adopted since is the writer's to take up first.
	if p.pending.Load() != 0 || p.cur == nil || isClosed(p.cur) || len(p.conns) > 0 || !p.cur.raw.canWriteDirect() {
		return false
	}
	// The entries' data alone over the bound: the writer takes them, and
	// they are not encoded twice (here, then again by the writer).
	data := 0
	for _, m := range msgs {
		for _, e := range m.Entries {
			data += len(e.Data)
		}
	}
	if data > t.cfg.DirectWriteMaxBytes {
		return false
	}
	frames := p.frames[:0]
	for _, m := range msgs {
		if m.Type == raft.MsgSnapshotRequest {
			return false
		}
		frames = appendMessageFrame(frames, m)
		if len(frames) > t.cfg.DirectWriteMaxBytes {
			p.frames = keepFrames(frames)
			return false // the writer writes it, or drops it if too large
		}
	}
	p.frames = keepFrames(frames)
	// No write deadline: nothing below waits (sock.Write). The one the
	// writer goroutine left has lapsed if the peer was idle longer than
	// WriteTimeout, and the runtime refuses any write past a deadline,
	// even one that would not wait: clear it.
	c := p.cur
	_ = c.raw.SetWriteDeadline(time.Time{})
	c.raw.setNonblocking(true)
	_, err := c.Write(frames)
	carried := c.raw.setNonblocking(false)
	if err != nil {
		t.fail(p, err)
		for _, m := range msgs {
			t.drop("write failed", m)
		}
		return true
	}
	t.directMessages.Add(int64(len(msgs)))
	if carried {
		t.directCarried.Add(1)
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	return true
}

// sock is a connection's TCP socket, below TLS if any. Its writes either
// wait, as a net.Conn's do, or (set by setNonblocking) take what the
// kernel's socket buffer takes at once and carry the rest, which the next
// waiting write (or flushCarry) writes first: the byte stream stays whole,
// and a direct write never blocks. A TLS connection above sees every
// write succeed; its records reach the peer in order either way.
//
// sock is safe for concurrent use; the transport writes it under the
// peer's writing lock, but a TLS reader may answer a key update.
type sock struct {
	net.Conn
	rc syscall.RawConn // nil: no non-blocking writes on this connection

	mu          sync.Mutex
	nonblocking bool
	carry       []byte // written by no one yet; at most one direct batch and its TLS records
}

func newSock(c net.Conn) *sock {
	s := &sock{Conn: c}
	if sc, ok := c.(syscall.Conn); ok && directWrites {
		if rc, err := sc.SyscallConn(); err == nil {
			s.rc = rc
		}
	}
	return s
}

// canWriteDirect reports whether a direct write may start: the socket can
// be written without waiting, and nothing is carried.
func (s *sock) canWriteDirect() bool {
	if !s.mu.TryLock() {
		return false // a TLS reader's write holds it
	}
	defer s.mu.Unlock()
	return s.rc != nil && len(s.carry) == 0
}

// setNonblocking switches the mode of the writes that follow, and reports
// whether bytes are carried.
func (s *sock) setNonblocking(on bool) (carried bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nonblocking = on
	return len(s.carry) > 0
}

func (s *sock) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nonblocking {
		n := 0
		if len(s.carry) == 0 {
			var err error
			if n, err = tryWrite(s.rc, b); err != nil {
				return n, err
			}
		}
		s.carry = append(s.carry, b[n:]...)
		return len(b), nil
	}
	if err := s.flushCarryLocked(); err != nil {
		return 0, err
	}
	return s.Conn.Write(b)
}

// flushCarry writes what a direct write left, waiting under the
// connection's write deadline.
func (s *sock) flushCarry() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushCarryLocked()
}

func (s *sock) flushCarryLocked() error {
	if len(s.carry) == 0 {
		return nil
	}
	n, err := s.Conn.Write(s.carry)
	s.carry = s.carry[:copy(s.carry, s.carry[n:])]
	return err
}

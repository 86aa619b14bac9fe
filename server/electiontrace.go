package server

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"coord/node"
	"coord/raft"
	"coord/storage/raftstore"
)

// The election trace: at --log-level debug a node logs each step of an
// election and a hand-over as it happens here (a TimeoutNow or a vote sent
// and received, a term or vote made durable and how long that took, a new
// leader's first append), so that the milliseconds of a hand-over can be
// laid end to end across the nodes' logs (coord cluster bench failover
// --node-log-level debug --node-log-format json: JSON logs carry
// nanosecond times). Appends and heartbeats are not logged, except the
// first of each term: a trace of every message would cost more than it
// shows. At any other level nothing is wrapped.

// traceEnabled reports whether l logs at debug level.
func traceEnabled(l *slog.Logger) bool {
	return l.Enabled(context.Background(), slog.LevelDebug)
}

// tracedMessage reports whether m is a step of an election or a
// hand-over: a TimeoutNow, a vote request or answer.
func tracedMessage(m raft.Message) bool {
	switch m.Type {
	case raft.MsgTimeoutNow, raft.MsgVoteRequest, raft.MsgVoteResponse:
		return true
	}
	return false
}

// traceMessage logs m, sent or received, if it is a traced step; a leader's
// first append of a term is logged once per term (firstAppend holds the
// last term logged).
func traceMessage(l *slog.Logger, what string, m raft.Message, firstAppend *uint64) {
	switch {
	case tracedMessage(m):
		l.Debug("trace: "+what, "type", m.Type.String(), "from", m.From, "to", m.To, "term", m.Term, "reject", m.Reject)
	case m.Type == raft.MsgAppendRequest && m.Term > *firstAppend:
		*firstAppend = m.Term
		l.Debug("trace: "+what+" first append of the term", "from", m.From, "to", m.To, "term", m.Term, "index", m.LogIndex+uint64(len(m.Entries)))
	}
}

// tracedTransport logs the election steps a node sends. Send runs on the
// node's loop goroutine only, so firstAppend needs no lock.
type tracedTransport struct {
	node.Transport
	log         *slog.Logger
	firstAppend uint64
}

func (t *tracedTransport) Send(msgs []raft.Message) {
	for _, m := range msgs {
		traceMessage(t.log, "send", m, &t.firstAppend)
	}
	t.Transport.Send(msgs)
}

// tracedStorage logs each durable change of term or vote with the time it
// took (a vote file and a log sync). It keeps the term and vote it last
// made durable, so that a Save need not ask the Disk for its hard state
// (a lock and a copy of the membership on every write). Not safe for
// concurrent use: Save runs on the node's loop goroutine only.
type tracedStorage struct {
	timedStorage
	log *slog.Logger
	// term and vote are the Disk's as of the last successful Save (or
	// its opening); a failed Save changes neither (raftstore.Disk.Save).
	term, vote uint64
}

func (t *tracedStorage) Save(hs raft.HardState, ents []raft.Entry, sync bool) error {
	start := time.Now()
	err := t.timedStorage.Save(hs, ents, sync)
	if !hs.IsEmpty() && (hs.Term != t.term || hs.Vote != t.vote) {
		t.log.Debug("trace: term and vote durable", "term", hs.Term, "vote", hs.Vote, "entries", len(ents),
			"took", time.Since(start), "err", err)
		if err == nil {
			t.term, t.vote = hs.Term, hs.Vote
		}
	}
	return err
}

// traced wraps the storage and transport of nc in the election trace if
// the node logs at debug level.
func (n *Node) traced(nc *node.Config, disk *raftstore.Disk) {
	if !traceEnabled(n.log) {
		return
	}
	nc.Transport = &tracedTransport{Transport: nc.Transport, log: n.log}
	hs, _, _ := disk.InitialState() // an error here is the shell's to see
	nc.Storage = &tracedStorage{timedStorage: timedStorage{disk, n.cfg.Metrics}, log: n.log, term: hs.Term, vote: hs.Vote}
}

// traceDelivered logs an election step received from a peer, and the
// first append of each term (firstAppend is the last term logged; the
// transport's readers call this concurrently).
func traceDelivered(l *slog.Logger, m raft.Message, firstAppend *atomic.Uint64) {
	switch {
	case tracedMessage(m):
		l.Debug("trace: received", "type", m.Type.String(), "from", m.From, "to", m.To, "term", m.Term, "reject", m.Reject)
	case m.Type == raft.MsgAppendRequest:
		for last := firstAppend.Load(); m.Term > last; last = firstAppend.Load() {
			if firstAppend.CompareAndSwap(last, m.Term) {
				l.Debug("trace: received first append of the term", "from", m.From, "to", m.To, "term", m.Term, "index", m.LogIndex+uint64(len(m.Entries)))
				return
			}
		}
	}
}

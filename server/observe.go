package server

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"coord/api"
	"coord/raft"
)

// What a node notices about its cluster beyond its Raft status, for the
// dashboard (/ui/, /v1/dashboard), /readyz and the per-peer metrics: when
// each peer was last heard from, the leader's commit index as its messages
// carry it, the elections this node saw, and the commands it applied per
// second.

// electionsMax bounds the elections a node remembers; writeSeconds is how
// many seconds of write rates it keeps.
const (
	electionsMax = 32
	writeSeconds = 60
)

// observer is what one node notices as messages arrive and its status
// changes.
//
// observer is safe for concurrent use: the transport's reader goroutines
// call delivered, the node's watch goroutine calls status, and HTTP
// handlers read.
type observer struct {
	self uint64
	// contacts maps a peer's id to the UnixNano time of its last message
	// (*atomic.Int64), so that the transport's readers never wait on a
	// lock.
	contacts sync.Map

	mu sync.Mutex
	// leaderTerm and leaderCommit: the highest commit index the leader of
	// leaderTerm sent this node.
	leaderTerm, leaderCommit uint64
	// votes is the last vote or pre-vote request this node received.
	votes voteSeen
	// lead and term are the leader and term of the last status seen;
	// electing is the election in progress, if any.
	lead, term uint64
	// electing is the election in progress, and started when it began.
	electing  *api.Election
	started   time.Time
	elections []api.Election // oldest first, at most electionsMax
	writes    writeRate
}

type voteSeen struct {
	from, term uint64
	pre        bool
	at         time.Time
}

func newObserver(self uint64) *observer { return &observer{self: self} }

// delivered notes a message from a peer, on the transport's goroutine.
func (o *observer) delivered(m raft.Message, now time.Time) {
	v, ok := o.contacts.Load(m.From)
	if !ok {
		v, _ = o.contacts.LoadOrStore(m.From, new(atomic.Int64))
	}
	v.(*atomic.Int64).Store(now.UnixNano())
	switch m.Type {
	case raft.MsgAppendRequest, raft.MsgHeartbeatRequest:
		o.mu.Lock()
		if m.Term > o.leaderTerm {
			o.leaderTerm, o.leaderCommit = m.Term, 0
		}
		if m.Term == o.leaderTerm {
			o.leaderCommit = max(o.leaderCommit, m.Commit)
		}
		o.mu.Unlock()
	case raft.MsgVoteRequest, raft.MsgPreVoteRequest:
		o.mu.Lock()
		o.votes = voteSeen{from: m.From, term: m.Term, pre: m.Type == raft.MsgPreVoteRequest, at: now}
		o.mu.Unlock()
	}
}

// lastContact returns when peer id was last heard from; ok is false if
// never.
func (o *observer) lastContact(id uint64) (time.Time, bool) {
	v, ok := o.contacts.Load(id)
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(0, v.(*atomic.Int64).Load()), true
}

// leaderCommitSeen returns the highest commit index the leader of term
// sent this node (0 if none).
func (o *observer) leaderCommitSeen(term uint64) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.leaderTerm != term {
		return 0
	}
	return o.leaderCommit
}

// status follows the node's Raft status, on the watch goroutine: it opens
// an election when the leader disappears or the term moves, and closes it
// when a leader is known. applied counts the commands applied so far, for
// the write rate.
func (o *observer) status(st raft.Status, applied uint64, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.writes.observe(now, applied)
	switch {
	case o.electing == nil && (st.Lead == 0 || st.Term > o.term || st.Lead != o.lead):
		o.started = o.startOf(st, now)
		o.electing = &api.Election{StartTerm: st.Term, Previous: o.lead, StartedUnixMs: o.started.UnixMilli(), Reason: o.reason(st, now)}
	}
	if o.electing != nil && st.Lead != 0 {
		e := *o.electing
		e.Term, e.Leader, e.ElectedUnixMs = st.Term, st.Lead, now.UnixMilli()
		e.TookMs = max(now.Sub(o.started), 0).Milliseconds()
		if e.Previous != 0 && e.Previous != o.self {
			if last, ok := o.lastContact(e.Previous); ok && !last.After(now) {
				ms := now.Sub(last).Milliseconds()
				e.SilenceMs = &ms
			}
		}
		if len(o.elections) == electionsMax {
			o.elections = append(o.elections[:0], o.elections[1:]...)
		}
		o.elections = append(o.elections, e)
		o.electing = nil
	}
	o.lead, o.term = st.Lead, st.Term
}

// startOf is when the election this status reveals began: the vote request
// that revealed it, if one came in the last few seconds, else now.
func (o *observer) startOf(st raft.Status, now time.Time) time.Time {
	if v := o.votes; !v.at.IsZero() && v.term >= st.Term && now.Sub(v.at) < 5*time.Second && v.at.Before(now) {
		return v.at
	}
	return now
}

// reason says, as well as this node can tell, why an election started.
func (o *observer) reason(st raft.Status, now time.Time) string {
	silence := func(id uint64) string {
		if last, ok := o.lastContact(id); ok {
			return fmt.Sprintf("; last heard from leader %d %d ms before", id, now.Sub(last).Milliseconds())
		}
		return ""
	}
	v := o.votes
	switch {
	case o.lead == 0 && o.term == 0 && len(o.elections) == 0:
		return "no leader known yet (this node started)"
	case st.LeadTransferee != 0:
		return fmt.Sprintf("leadership transfer to node %d", st.LeadTransferee)
	case st.Role == raft.Candidate || st.Role == raft.PreCandidate:
		return fmt.Sprintf("election timeout on this node (%d)%s", o.self, silence(o.lead))
	case !v.at.IsZero() && now.Sub(v.at) < 5*time.Second && v.from != o.self:
		kind := "votes"
		if v.pre {
			kind = "pre-votes"
		}
		return fmt.Sprintf("node %d's election timeout: it asked for %s at term %d%s", v.from, kind, v.term, silence(o.lead))
	case o.lead != 0 && o.lead == o.self:
		return "this node stopped leading"
	case o.lead != 0:
		return fmt.Sprintf("leader %d was lost or deposed%s", o.lead, silence(o.lead))
	default:
		return fmt.Sprintf("term moved to %d", st.Term)
	}
}

// recentElections returns the elections seen, newest first.
func (o *observer) recentElections() []api.Election {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]api.Election, len(o.elections))
	for i, e := range o.elections {
		out[len(out)-1-i] = e
	}
	return out
}

// writesPerSecond returns the commands applied in each of the last
// writeSeconds whole seconds, oldest first.
func (o *observer) writesPerSecond() []uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.writes.series()
}

// writeRate counts commands applied per whole second, over the last
// writeSeconds seconds.
type writeRate struct {
	second int64  // the Unix second being counted
	base   uint64 // the applied count when it began
	last   uint64 // the latest applied count seen
	counts [writeSeconds]uint64
	filled int // how many of counts are real seconds
	next   int // where the next finished second goes
}

func (w *writeRate) observe(now time.Time, applied uint64) {
	sec := now.Unix()
	switch {
	case w.second == 0:
		w.second, w.base = sec, applied
	case sec > w.second:
		// Close the second that ended, and record idle seconds after it.
		w.push(w.last - w.base)
		for s := w.second + 1; s < sec && s < w.second+writeSeconds; s++ {
			w.push(0)
		}
		w.second, w.base = sec, w.last
	}
	w.last = max(w.last, applied)
}

func (w *writeRate) push(n uint64) {
	w.counts[w.next] = n
	w.next = (w.next + 1) % writeSeconds
	w.filled = min(w.filled+1, writeSeconds)
}

func (w *writeRate) series() []uint64 {
	out := make([]uint64, 0, w.filled)
	for i := range w.filled {
		out = append(out, w.counts[(w.next-w.filled+i+writeSeconds)%writeSeconds])
	}
	return out
}

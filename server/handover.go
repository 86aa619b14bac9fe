package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"coord/api"
	"coord/raft"
)

// ErrHandOverTargetGone means the voter a leader was handing over to lost
// its connection to it (it is stopping too), so HandOver gave up.
var ErrHandOverTargetGone = errors.New("server: the hand-over's target closed its connection")

// HandOver hands leadership to another voter before this node stops, if
// it leads: it picks the voter whose log matches the most of the leader's
// (the one that needs the fewest entries before it may take over), asks
// the core to transfer to it (Raft §3.10: the leader brings it up to date
// and sends it TimeoutNow, so it campaigns at once instead of waiting for
// an election timeout), and waits until another node leads.
// It returns the node that took over (the target, unless another voter won
// the next term), 0 if it did not lead or has no other voter. If ctx ends
// first (the target did not take over: it is down, or
// far behind), it returns ctx's error, and the node still leads: the
// caller stops it anyway, and the others elect a leader as after a crash.
// Only a voter this node has a connection to is chosen; if the target's
// connection goes meanwhile (the whole cluster is stopping) it returns
// ErrHandOverTargetGone at once.
//
// Another node leads once this node's status names it, or, sooner, once a
// leader's request (an append, a heartbeat, a snapshot) of a later term
// than the one this node led arrives: only the leader of a term sends
// those, so its sender leads, and there is no need to wait until this
// node has written the new leader's first entry (a disk write) for its
// status to say so.
//
// While the transfer runs the leader refuses proposals (ErrNotLeader), so
// nothing it accepts is left for the next leader to finish. Serve hands
// over the same way on shutdown (handOver), bounded by Config.HandOverMax.
func (n *Node) HandOver(ctx context.Context) (uint64, error) {
	return n.handOver(ctx, nil)
}

// handOver is HandOver, calling campaigning (if not nil) once the target
// is seen campaigning on this node's TimeoutNow: its vote request of a
// later term arrived. That is a round of votes before the new leader's
// first append, and the writes held meanwhile may go to it then (Serve's
// handedOver.early): it holds them while it campaigns, and appends them
// with its first entry (Node.ProposeAtElection).
func (n *Node) handOver(ctx context.Context, campaigning func(target uint64)) (uint64, error) {
	st := n.shell.Status()
	if st.Role != raft.Leader {
		return 0, nil
	}
	to := mostUpToDate(st, n.connected)
	if to == 0 {
		return 0, nil
	}
	seen := newLeaderSeen(st.Term, to)
	n.handOverSeen.Store(seen)
	defer n.handOverSeen.Store(nil)
	n.log.Debug("trace: hand over", "to", to, "match", st.Progress[to].Match, "last_index", st.LastIndex)
	if err := n.shell.TransferLeadership(ctx, to); err != nil {
		return to, fmt.Errorf("server: hand over to node %d: %w", to, mapErr(err))
	}
	campaign := seen.campaigning
	if campaigning == nil {
		campaign = nil
	}
	for {
		changed := n.shell.Changed()
		st := n.shell.Status()
		if st.Role != raft.Leader && st.Lead != 0 && st.Lead != n.cfg.ID {
			n.log.Info("handed leadership over", "to", to, "leader", st.Lead, "term", st.Term)
			return st.Lead, nil
		}
		select {
		case <-campaign:
			n.log.Debug("trace: hand-over target campaigns", "to", to)
			campaigning(to)
			campaign = nil
		case <-seen.done:
			leader, term := seen.leader()
			n.log.Info("handed leadership over", "to", to, "leader", leader, "term", term)
			return leader, nil
		case <-changed:
		case <-time.After(handOverPoll):
			if !n.connected(to) {
				// The target is stopping too (the whole cluster is): it
				// will not take over, and waiting would only delay this
				// node's exit.
				return to, fmt.Errorf("server: hand over to node %d: %w", to, ErrHandOverTargetGone)
			}
		case <-ctx.Done():
			return to, fmt.Errorf("server: hand over to node %d: %w", to, ctx.Err())
		case <-n.shell.Done():
			return to, fmt.Errorf("server: hand over to node %d: %w", to, n.shell.Err())
		}
	}
}

// leaderSeen watches the messages a leader handing over receives for the
// first leader's request of a later term than the one it led: its sender
// leads that term (Raft: one leader per term, and only the leader sends
// appends, heartbeats and snapshots). It also watches for the target's
// vote request of a later term: the target campaigns, on this node's
// TimeoutNow.
//
// leaderSeen is safe for concurrent use: the transport's readers call
// observe.
type leaderSeen struct {
	term   uint64 // the term this node led
	target uint64 // the node it hands over to
	once   sync.Once
	// done is closed once a later leader's request arrived; from then on
	// by and in say whose and of which term.
	done   chan struct{}
	by, in atomic.Uint64
	// campaigning is closed once the target's vote request of a later
	// term arrived.
	campaigning  chan struct{}
	campaignOnce sync.Once
}

func newLeaderSeen(term, target uint64) *leaderSeen {
	return &leaderSeen{term: term, target: target, done: make(chan struct{}), campaigning: make(chan struct{})}
}

// observe looks at one message that arrived from a peer.
func (l *leaderSeen) observe(m raft.Message) {
	if m.Type == raft.MsgVoteRequest && m.Transfer && m.Term > l.term && m.From == l.target && m.From != 0 {
		l.campaignOnce.Do(func() { close(l.campaigning) })
		return
	}
	switch m.Type {
	case raft.MsgAppendRequest, raft.MsgHeartbeatRequest, raft.MsgSnapshotRequest:
	default:
		return
	}
	if m.Term <= l.term || m.From == 0 {
		return
	}
	l.once.Do(func() {
		l.by.Store(m.From)
		l.in.Store(m.Term)
		close(l.done)
	})
}

// leader returns the leader seen and its term, once done is closed.
func (l *leaderSeen) leader() (id, term uint64) { return l.by.Load(), l.in.Load() }

// handOverPoll is how often HandOver looks whether its target is still
// connected. The transport now tells when a connection comes or goes
// (tcp.Transport.PeersChanged); HandOver still samples, so that a
// connection dropped and dialed again within the interval does not end
// the hand-over.
const handOverPoll = 10 * time.Millisecond

// connected reports whether the transport has a connection to peer id.
func (n *Node) connected(id uint64) bool {
	_, ok := n.tr.PeerMeta(id)
	return ok
}

// mostUpToDate returns the voter other than the leader whose Match is
// highest in the leader's status st (the lowest ID among equals, so the
// choice is the same every time), preferring one that answered within the
// last check-quorum round, among those connected says this node has a
// connection to; 0 if there is none.
func mostUpToDate(st raft.Status, connected func(id uint64) bool) uint64 {
	var best uint64
	var bestPr raft.Progress
	better := func(pr raft.Progress) bool {
		if pr.RecentActive != bestPr.RecentActive {
			return pr.RecentActive
		}
		return pr.Match > bestPr.Match
	}
	for _, id := range slices.Sorted(slices.Values(st.Conf.Voters)) {
		pr, ok := st.Progress[id]
		if id == st.ID || !ok || !connected(id) {
			continue
		}
		if best == 0 || better(pr) {
			best, bestPr = id, pr
		}
	}
	return best
}

// handedOver answers for a leader that is handing leadership over and
// is about to stop. Until begin, it passes every request to next.
//
// From begin to end (the transfer; the leader refuses proposals
// meanwhile) it holds writes, requests other than GET and HEAD, instead
// of passing them on to be refused: a client would only poll every node
// until the new leader is elected, and load the machines the election
// runs on. A held write is answered when the transfer ends: as below if
// it succeeded, passed on to next if it failed (the node leads on until
// it stops, and the others elect a leader as after a crash).
//
// After end naming a leader it refuses every request at once with 503 unavailable,
// naming the new leader (Coord-Leader, and "leader" in the body) and
// closing the connection: a client switches to the new leader on this
// answer instead of having its request forwarded through a node that is
// going away, and nothing it sends is left in flight here when the node
// stops. end also closes the server's idle keep-alive connections, so
// that clients see them close now rather than on their next request.
//
// handedOver is safe for concurrent use.
type handedOver struct {
	next http.Handler
	node *Node
	// phase is handOverServing, handOverTransferring or handOverDone;
	// ended is closed when the transfer ends, either way, or when the
	// target campaigns (early), whichever comes first.
	phase     atomic.Int32
	ended     chan struct{}
	endedOnce sync.Once
	// leader is the node that took over (end).
	leader atomic.Uint64
	// held, if set, is called when a write starts waiting (tests).
	held func()
}

const (
	handOverServing int32 = iota
	handOverTransferring
	handOverDone
)

// newHandedOver returns a handedOver that passes requests to next until
// begin.
func newHandedOver(next http.Handler, node *Node) *handedOver {
	return &handedOver{next: next, node: node, ended: make(chan struct{})}
}

// begin starts holding writes: the transfer begins.
func (h *handedOver) begin() { h.phase.Store(handOverTransferring) }

// early names target, campaigning on this node's TimeoutNow, as the
// leader from now on: the writes held are answered at once, naming it,
// rather than a round of votes later, when its first append arrives. They
// reach it while it is a candidate, which holds them and appends them
// with its first entry (Node.ProposeAtElection), or just after. If it does
// not win after all, it refuses or forwards them, and the client tries
// again: they were appended nowhere.
func (h *handedOver) early(target uint64) {
	h.leader.Store(target)
	h.phase.Store(handOverDone)
	h.endedOnce.Do(func() { close(h.ended) })
}

// end ends the transfer: leader is the node that took over, 0 if none
// did. If one did, h refuses every request from now on, naming it: the
// writes held meanwhile first, then srv's idle connections are closed
// (net/http's SetKeepAlivesEnabled(false) does both that and "Connection:
// close" on every later answer; closing a TLS connection writes to it, and
// the held writes need not wait for that). If not, it serves as before
// begin, held writes included.
func (h *handedOver) end(srv *http.Server, leader uint64) {
	if leader == 0 && h.phase.Load() != handOverDone {
		h.phase.Store(handOverServing)
		h.endedOnce.Do(func() { close(h.ended) })
		return
	}
	if leader != 0 {
		h.leader.Store(leader)
	}
	// (With leader 0 after early: the target campaigned but was not seen
	// to lead. The node stops anyway; requests go on naming the target,
	// which forwards or refuses them.)
	h.phase.Store(handOverDone)
	h.endedOnce.Do(func() { close(h.ended) })
	srv.SetKeepAlivesEnabled(false)
}

func (h *handedOver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.phase.Load() == handOverTransferring && r.Method != http.MethodGet && r.Method != http.MethodHead {
		if h.held != nil {
			h.held()
		}
		heldAt := time.Now()
		select {
		case <-h.ended:
		case <-r.Context().Done():
			return // the client left; it gets no answer
		}
		h.node.log.Debug("trace: held write released", "held", time.Since(heldAt))
	}
	if phase := h.phase.Load(); phase != handOverDone {
		if phase == handOverServing && r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.serveAnswered(w, r)
			return
		}
		h.next.ServeHTTP(w, r)
		return
	}
	// Leader, not Status: Status waits for the storage's lock, which the
	// node's loop holds while it writes the new leader's first entry.
	self, leader := h.node.Leader()
	w.Header().Set(api.HeaderNode, strconv.FormatUint(self, 10))
	if leader == 0 || leader == self {
		// Its status may not show the leader yet (HandOver saw the new
		// leader's first request before this node wrote it).
		leader = h.leader.Load()
	}
	msg := fmt.Sprintf("node %d is stopping and has handed leadership over", self)
	if leader != 0 {
		w.Header().Set(api.HeaderLeader, strconv.FormatUint(leader, 10))
		msg += fmt.Sprintf("; the leader is node %d", leader)
	}
	// No Retry-After: the client should retry at once, at the leader.
	w.Header().Set("Connection", "close")
	_ = writeJSON(w, http.StatusServiceUnavailable, api.ErrorResponse{Code: api.CodeUnavailable, Error: msg, Leader: &leader})
}

// serveAnswered passes a write to next through a handOverAnswer, taken
// from a pool: every write before a hand-over goes through one, for a
// hand-over that comes once in a process's life, and a pooled one costs
// the write no allocation. It cannot be left out until a hand-over is near
// (an atomic checked at the write's arrival): the write it is for arrived
// before the hand-over began. The handler must not keep the writer after
// it returns (net/http's rule), so the wrapper goes back to the pool then.
func (h *handedOver) serveAnswered(w http.ResponseWriter, r *http.Request) {
	a := handOverAnswers.Get().(*handOverAnswer)
	*a = handOverAnswer{ResponseWriter: w, h: h, ctx: r.Context()}
	h.next.ServeHTTP(a, r)
	*a = handOverAnswer{} // the pool keeps no request's writer or context
	handOverAnswers.Put(a)
}

// handOverAnswers holds the idle handOverAnswers (serveAnswered).
var handOverAnswers = sync.Pool{New: func() any { return new(handOverAnswer) }}

// handOverAnswer is the ResponseWriter of a write that came before the
// transfer began. If it is refused (503) once the transfer has begun (it
// reached the loop after the core began the transfer, which refuses
// proposals; the node, still leading, named itself), the refusal waits,
// as a held write does, until the transfer ends or the target campaigns,
// and names the node that takes over: naming itself sent the client to
// a follower, and back here, before the target (1.5 to 7 ms of a gap).
// It was appended nowhere, so only the hint changes: the Coord-Leader
// header and the body's "leader" both name the target (the refusal's own
// body, which named this node, is dropped).
type handOverAnswer struct {
	http.ResponseWriter
	h        *handedOver
	ctx      context.Context
	replaced bool // the refusal's body was written here; the handler's is dropped
}

func (a *handOverAnswer) WriteHeader(code int) {
	if code != http.StatusServiceUnavailable || a.h.phase.Load() == handOverServing || a.replaced {
		a.ResponseWriter.WriteHeader(code)
		return
	}
	select {
	case <-a.h.ended:
	case <-a.ctx.Done():
	}
	leader := a.h.leader.Load()
	if leader == 0 {
		a.ResponseWriter.WriteHeader(code)
		return
	}
	a.replaced = true
	a.Header().Set(api.HeaderLeader, strconv.FormatUint(leader, 10))
	msg := fmt.Sprintf("leadership is being handed over to node %d; retry there", leader)
	_ = writeJSON(a.ResponseWriter, code, api.ErrorResponse{Code: api.CodeUnavailable, Error: msg, Leader: &leader})
}

// Write drops the handler's body of a refusal WriteHeader replaced.
func (a *handOverAnswer) Write(p []byte) (int, error) {
	if a.replaced {
		return len(p), nil
	}
	return a.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (a *handOverAnswer) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// Flush passes a flush on (a stream's events).
func (a *handOverAnswer) Flush() {
	if f, ok := a.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

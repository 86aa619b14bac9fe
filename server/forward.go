package server

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"coord/node"
	"coord/raft"
)

// ErrNoPeerRoute means a follower could not forward a write over the Raft
// transport (no connection to its leader): nothing was sent, and the API
// forwards the request over HTTP instead.
var ErrNoPeerRoute = errors.New("server: no peer connection to the leader")

// ProposalForwarder is a Replica that can forward a write to its leader as
// a Raft proposal and wait for it in its own log (Node does). The API uses
// it for the plain writes a follower takes; a Replica without it has them
// forwarded over HTTP.
type ProposalForwarder interface {
	// ProposeForwarded proposes cmd from whichever role this node has (a
	// follower forwards it to its leader over the peer transport) and
	// returns its result once this node has applied it. ErrNotLeader or
	// ErrNoPeerRoute: it was not sent anywhere (also when the leader
	// changed, or a snapshot was installed, before the loop took it).
	// ctx's error, or the error the node stopped with: the context ended,
	// or the node stopped, before the loop took it, so it was not sent
	// either (the API still answers a timeout as of unknown outcome).
	// ErrOutcomeUnknown: it may or may not apply (the context ended,
	// leadership changed, the node stopped or installed a snapshot past
	// it, after it was sent).
	ProposeForwarded(ctx context.Context, cmd Command) (Result, error)
}

var _ ProposalForwarder = (*Node)(nil)

// forwardOutcome is what a forwarded write's waiter hears: the state
// machine's answer by request number (res, err), or, if isVerdict, the
// handler's (verdict, from node.ForwardWaiter.Done).
type forwardOutcome struct {
	res       Result
	err       error
	isVerdict bool
	verdict   node.Result
}

// forwardOutcomes is the capacity of a forwarded write's channel: the
// state machine answers a request number at most once (applied and
// failAll forget it) and the handler calls Done once, so neither send
// ever blocks the loop.
const forwardOutcomes = 2

// forwardWaiters is safe for concurrent use; a nil one waits for nothing.
//
// forwardWaiters are the writes this node forwarded and waits for, by
// Command.Request. The state machine answers them as it applies their
// entries (on the loop goroutine); a request ends its wait itself
// otherwise.
type forwardWaiters struct {
	// next numbers the requests: it starts at a random value, so that a
	// restarted node, replaying its log, never takes an entry of its
	// previous life for one of its new requests.
	next atomic.Uint64
	// queued counts the writes queued for the node's loop
	// (forwardQueue.push).
	queued atomic.Uint64
	// handed counts the writes the node's loop took (forwardCall.Take),
	// which it sends to the leader in the Ready that follows.
	handed atomic.Uint64
	// placed counts the writes whose leader said where it appended them.
	placed atomic.Uint64
	// counted is closed (and forgotten) when a counter moves, if
	// someone asked for it (countChanged): tests wait on it.
	countedMu sync.Mutex
	counted   chan struct{}
	awaited   atomic.Bool // countChanged was called: count takes the lock
	mu        sync.Mutex
	wait      map[uint64]chan forwardOutcome
}

// count adds one to c (queued, handed or placed) and wakes countChanged's
// waiters.
func (f *forwardWaiters) count(c *atomic.Uint64) {
	c.Add(1)
	if !f.awaited.Load() {
		return // nobody waits (outside tests): no lock on the write's path
	}
	f.countedMu.Lock()
	defer f.countedMu.Unlock()
	if f.counted != nil {
		close(f.counted)
		f.counted = nil
	}
}

// countChanged returns a channel closed when a counter next moves.
// Take it before reading the counters, so that a change in between is not
// missed.
func (f *forwardWaiters) countChanged() <-chan struct{} {
	f.awaited.Store(true)
	f.countedMu.Lock()
	defer f.countedMu.Unlock()
	if f.counted == nil {
		f.counted = make(chan struct{})
	}
	return f.counted
}

func newForwardWaiters() *forwardWaiters {
	f := &forwardWaiters{wait: map[uint64]chan forwardOutcome{}}
	var b [8]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand)
	f.next.Store(binary.LittleEndian.Uint64(b[:]) >> 1)
	return f
}

// add returns a new request number, whose outcome comes on ch (of
// capacity forwardOutcomes).
func (f *forwardWaiters) add(ch chan forwardOutcome) uint64 {
	id := f.next.Add(1)
	if id == 0 {
		id = f.next.Add(1) // 0 means "not forwarded"
	}
	f.mu.Lock()
	f.wait[id] = ch
	f.mu.Unlock()
	return id
}

func (f *forwardWaiters) remove(id uint64) {
	f.mu.Lock()
	delete(f.wait, id)
	f.mu.Unlock()
}

// applied answers request id with res, if it still waits. A duplicate of
// the entry (which TCP does not make, but a retried request could) finds
// nobody waiting.
func (f *forwardWaiters) applied(id uint64, res Result) {
	if f == nil {
		return
	}
	f.mu.Lock()
	ch, ok := f.wait[id]
	delete(f.wait, id)
	f.mu.Unlock()
	if ok {
		ch <- forwardOutcome{res: res}
	}
}

// failAll answers every waiting request with err: a snapshot installed
// here covered entries this node never applied one by one.
func (f *forwardWaiters) failAll(err error) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, ch := range f.wait {
		ch <- forwardOutcome{err: err}
		delete(f.wait, id)
	}
}

// ForwardRefusedError is a forwarded write the leader, or the node this
// follower took for it, refused: it was appended nowhere, so a retry is
// safe. Lead is the node the refusing node named as the leader (itself if
// it leads but takes no writes for now, the target of a leadership
// transfer in progress; 0: none known). The API answers unavailable,
// naming Lead.
type ForwardRefusedError struct {
	Lead uint64
	Err  error
}

func (e *ForwardRefusedError) Error() string {
	return fmt.Sprintf("server: forwarded write refused, not applied: %v", e.Err)
}

func (e *ForwardRefusedError) Unwrap() error { return e.Err }

// ProposeForwarded implements ProposalForwarder. The write carries this
// node's ID and a fresh request number (Command.Origin, Request); the
// state machine answers it when this node applies its entry, with the
// result its own Apply computed, which is the leader's (Apply is
// deterministic). A leader proposes it locally (raft.Core.Forward).
//
// The leader answers where it appended the write, or that it refused it
// (node.ForwardWaiter). A refusal ends the wait at once
// (ForwardRefusedError). Once placed, the write's fate is certain even if
// the leader changes: this node waits for its index and answers from the
// entry committed there, its own (the result) or another (not applied,
// ErrNotLeader). Unknown (ErrOutcomeUnknown) is left for what truly is:
// the leader changed before it said where the write went (after a grace
// of one heartbeat interval for its answer to arrive, none when the old
// leader's end closed the connection since), the context ended,
// the node stopped, or a snapshot covered the index.
func (n *Node) ProposeForwarded(ctx context.Context, cmd Command) (Result, error) {
	// Taken before the status: a change of leader or term from this point
	// on closes it, and then shows in the status.
	changed := n.shell.RoleChanged()
	st := n.shell.Status()
	lead, term := st.Lead, st.Term
	if lead == 0 {
		return Result{}, fmt.Errorf("%w: node %d knows no leader", ErrNotLeader, n.cfg.ID)
	}
	if lead != n.cfg.ID {
		if _, connected := n.tr.PeerMeta(lead); !connected {
			return Result{}, fmt.Errorf("%w: node %d to %d", ErrNoPeerRoute, n.cfg.ID, lead)
		}
	}
	closes := n.peerCloses.count(lead) // taken before the write goes out
	cmd.Origin = n.cfg.ID
	// One channel hears both the state machine and the handler, and one
	// allocation holds what the wait shares with the loop.
	call := &forwardCall{outcome: make(chan forwardOutcome, forwardOutcomes), forwards: n.sm.forwards}
	outcome := call.outcome
	id := n.sm.forwards.add(outcome)
	cmd.Request = id
	answered := false // by the state machine, which forgot id then
	defer func() {
		if !answered {
			n.sm.forwards.remove(id)
		}
	}()
	call.data, call.waiter = cmd.Marshal(), node.ForwardWaiter{Placed: call.place, Done: call.done}
	// Queued for the loop, which takes it with the others queued
	// meanwhile (forwardQueue). Until it does, the write can be given up
	// as gone nowhere (abandon). A refusal on this node (no leader known,
	// a failing storage) comes as the handler's verdict.
	n.forwardQueue.push(call)
	var (
		where      = "the leader changed before it said where the write went"
		unanswered bool
		moved      bool // the leader or term changed
		grace      <-chan time.Time
	)
	for {
		select {
		case o := <-outcome:
			if !o.isVerdict {
				answered = true
				if o.err != nil && call.abandon() {
					// A snapshot's failAll answered it before the loop
					// took it: it goes nowhere, and HTTP forwarding may
					// send it again.
					return Result{}, fmt.Errorf("%w: node %d installed a snapshot before the write went out", ErrNotLeader, n.cfg.ID)
				}
				return o.res, o.err
			}
			r := o.verdict
			if !errors.Is(r.Err, raft.ErrForwardUnanswered) {
				return n.forwardEnded(outcome, r)
			}
			// No answer: wait, as without one, for the entry by its
			// request number, until the leader changes. Done is called
			// once: what comes on the channel from now on is the state
			// machine's.
			unanswered, where = true, "the leader never said where the write went"
			if moved {
				return n.forwardGaveUp(outcome, where)
			}
		case <-changed:
			changed = n.shell.RoleChanged()
			// The change is judged against the leader of the status read
			// before the write was queued, though the loop may take the
			// write in the very turn that learned of the next leader, and
			// forward it there (raft.Core.Forward sends to the leader it
			// knows when it takes it; with none known, it refuses). That
			// cannot make an answer wrong, only less certain than it could
			// be: "not sent" (abandon) needs the write untaken, which the
			// loop's Take and abandon decide between them; "refused",
			// "lost" and the result are facts the loop states whichever
			// leader got the write (a refusal, the entry committed at the
			// index a leader named, the write applied here). What the old
			// leader decides is only how soon the wait gives up with
			// unknown_outcome: at once if the old leader's connection
			// closed since, after the grace if no answer came in it, when
			// the write went to the new leader whose answer would have
			// made it certain. Both are rare (the write must be taken in
			// the turn of the change, and the new leader's answer take
			// longer than a heartbeat interval, or the old leader's
			// connection close), and unknown is always a true answer.
			if st := n.shell.Status(); !moved && (st.Lead != lead || st.Term != term) {
				switch {
				case call.abandon():
					// Not taken yet: it goes nowhere, and HTTP forwarding
					// finds the new leader.
					return Result{}, fmt.Errorf("%w: node %d's leader changed from %d in term %d to %d in term %d before the write went out",
						ErrNotLeader, n.cfg.ID, lead, term, st.Lead, st.Term)
				case call.state.Load() == forwardRefused:
					continue // its verdict waits on the channel
				}
				moved = true
				where = fmt.Sprintf("the leader changed from %d in term %d to %d in term %d before it said where the write went", lead, term, st.Lead, st.Term)
				switch {
				case call.placed.Load():
					// The entry committed at its index will tell. Placed
					// is called on the loop before the Ready's status is
					// published, so an answer that came with the change
					// or before it is seen here.
				case unanswered:
					return n.forwardGaveUp(outcome, where)
				case lead != n.cfg.ID && n.peerCloses.count(lead) != closes:
					// The old leader's end closed the connection since
					// the write went out (its process died, as a rule:
					// the kernel closed it): no answer can come over it,
					// and answers are not sent again, so waiting would
					// only hold the client back from the new leader.
					return n.forwardGaveUp(outcome, where+" (its connection closed)")
				default:
					// A deposed leader answers what it received; give its
					// answer a heartbeat interval to arrive.
					grace = n.graceTimer()
				}
			}
		case <-grace:
			if call.placed.Load() {
				// The deposed leader's answer came in its grace: the
				// entry committed at the index it named will tell.
				grace = nil
				continue
			}
			return n.forwardGaveUp(outcome, where)
		case <-ctx.Done():
			if res, err, ended := n.forwardNotSent(call, ctx.Err()); ended {
				return res, err
			}
			return n.forwardGaveUp(outcome, ctx.Err().Error())
		case <-n.shell.Done():
			if res, err, ended := n.forwardNotSent(call, mapErr(n.shell.Err())); ended {
				return res, err
			}
			return n.forwardGaveUp(outcome, "the node stopped")
		}
	}
}

// graceTimer returns the channel that ends the grace a forwarded write
// gives its deposed leader's answer: a heartbeat interval, the time a
// leader takes to send anything, unless a test set forwardGrace.
func (n *Node) graceTimer() <-chan time.Time {
	if n.forwardGrace != nil {
		return n.forwardGrace()
	}
	return time.After(n.cfg.TickInterval * time.Duration(n.cfg.HeartbeatTicks))
}

// peerCloseCounts counts, per peer, the connections closed by the peer's
// end. Safe for concurrent use.
type peerCloseCounts struct {
	mu sync.Mutex
	n  map[uint64]uint64
}

func (c *peerCloseCounts) add(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[uint64]uint64)
	}
	c.n[id]++
}

func (c *peerCloseCounts) count(id uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// forwardNotSent answers a forwarded write whose wait ends (for err) if
// the write went nowhere: the loop never took it (it never will now), or
// refused it (the refusal answers). Otherwise ended is false.
func (n *Node) forwardNotSent(call *forwardCall, err error) (res Result, _ error, ended bool) {
	switch {
	case call.abandon():
		return Result{}, err, true
	case call.state.Load() == forwardRefused:
		// Refused sends its verdict right after it sets the state; a
		// snapshot installed before may have failed the request number
		// first (failAll).
		o := <-call.outcome
		if !o.isVerdict {
			return o.res, o.err, true
		}
		res, err := n.forwardEnded(call.outcome, o.verdict)
		return res, err, true
	}
	return Result{}, nil, false
}

// forwardEnded answers a forwarded write from the handler's verdict:
// applied here (the state machine's result), refused (appended nowhere),
// lost to another entry at its index (never applied), or unknown.
func (n *Node) forwardEnded(outcome <-chan forwardOutcome, r node.Result) (Result, error) {
	if r.Err == nil {
		if res, ok := r.Value.(Result); ok {
			return res, nil
		}
		// Applied before the leader's answer came: the state machine
		// answered by request number already.
		return n.forwardGaveUp(outcome, "its entry applied before the leader's answer")
	}
	if refused, ok := errors.AsType[*node.RefusedError](r.Err); ok {
		return Result{}, &ForwardRefusedError{Lead: refused.Lead, Err: refused}
	}
	return Result{}, mapErr(r.Err)
}

// forwardGaveUp answers a forwarded write whose wait ended before its
// entry applied here: unknown outcome, since the leader may have appended
// it, unless it applied just now (the state machine's answer waits on the
// channel, maybe beside the handler's, which is passed over).
func (n *Node) forwardGaveUp(outcome <-chan forwardOutcome, why string) (Result, error) {
	for range forwardOutcomes {
		var o forwardOutcome
		ok := true
		select {
		case o = <-outcome:
		default:
			ok = false
		}
		if !ok {
			break
		}
		if !o.isVerdict {
			return o.res, o.err
		}
	}
	return Result{}, fmt.Errorf("%w: forwarded to the leader, then %s", ErrOutcomeUnknown, why)
}

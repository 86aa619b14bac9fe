package server

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
	// ErrNoPeerRoute: it was not sent anywhere. ErrOutcomeUnknown: it may
	// or may not apply (the context ended, leadership changed, the node
	// stopped or installed a snapshot past it).
	ProposeForwarded(ctx context.Context, cmd Command) (Result, error)
}

var _ ProposalForwarder = (*Node)(nil)

// forwardOutcome is what a forwarded write's waiter hears.
type forwardOutcome struct {
	res Result
	err error
}

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
	// handed counts the writes handed to the node's loop, which sends
	// them to the leader in the Ready that follows.
	handed atomic.Uint64
	mu     sync.Mutex
	wait   map[uint64]chan forwardOutcome
}

func newForwardWaiters() *forwardWaiters {
	f := &forwardWaiters{wait: map[uint64]chan forwardOutcome{}}
	var b [8]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand)
	f.next.Store(binary.LittleEndian.Uint64(b[:]) >> 1)
	return f
}

// add returns a new request number and the channel its outcome comes on.
func (f *forwardWaiters) add() (uint64, <-chan forwardOutcome) {
	id := f.next.Add(1)
	if id == 0 {
		id = f.next.Add(1) // 0 means "not forwarded"
	}
	ch := make(chan forwardOutcome, 1)
	f.mu.Lock()
	f.wait[id] = ch
	f.mu.Unlock()
	return id, ch
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

// ProposeForwarded implements ProposalForwarder. The write carries this
// node's ID and a fresh request number (Command.Origin, Request); the
// state machine answers it when this node applies its entry, with the
// result its own Apply computed, which is the leader's (Apply is
// deterministic). A leader proposes it locally (raft.Core.Forward).
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
	cmd.Origin = n.cfg.ID
	id, outcome := n.sm.forwards.add()
	defer n.sm.forwards.remove(id)
	cmd.Request = id
	if err := n.shell.Forward(ctx, cmd.Marshal()); err != nil {
		// Refused on this node: it went nowhere.
		return Result{}, mapErr(err)
	}
	n.sm.forwards.handed.Add(1)
	for {
		select {
		case o := <-outcome:
			return o.res, o.err
		case <-changed:
			if st := n.shell.Status(); st.Lead != lead || st.Term != term {
				return n.forwardGaveUp(outcome, fmt.Sprintf("the leader changed from %d in term %d to %d in term %d", lead, term, st.Lead, st.Term))
			}
			changed = n.shell.RoleChanged()
		case <-ctx.Done():
			return n.forwardGaveUp(outcome, ctx.Err().Error())
		case <-n.shell.Done():
			return n.forwardGaveUp(outcome, "the node stopped")
		}
	}
}

// forwardGaveUp answers a forwarded write whose wait ended before its
// entry applied here: unknown outcome, since the leader may have appended
// it, unless it applied just now.
func (n *Node) forwardGaveUp(outcome <-chan forwardOutcome, why string) (Result, error) {
	select {
	case o := <-outcome:
		return o.res, o.err
	default:
	}
	return Result{}, fmt.Errorf("%w: forwarded to the leader, then %s", ErrOutcomeUnknown, why)
}

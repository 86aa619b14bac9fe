package server

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"coord/node"
	"coord/raft"
)

// electionAwaiter is a Replica that can wait for the outcome of an
// election it is running as a candidate.
type electionAwaiter interface {
	// AwaitElection returns once this node is no longer a candidate (it
	// won, heard of another leader, or went back to waiting), or ctx
	// ends, or at most one election timeout after the call.
	AwaitElection(ctx context.Context)
}

// AwaitElection implements electionAwaiter: a write that reaches a node
// while it campaigns waits for the election's outcome instead of being
// refused for want of a leader. A leader's successor in a hand-over is
// such a node for a few milliseconds (from its TimeoutNow to its first
// entry written); the stopping leader names it as soon as its first
// append arrives, and a client that comes at once should be answered by
// it, not sent round the cluster with a 503 and a backoff. Only a
// candidate waits (it passed pre-vote, or was told to campaign by its
// leader: the outcome is one round of votes away); a pre-candidate, which
// may be a node cut off from the others, does not, nor does a follower.
//
// A node told to campaign waits too while its status does not show it
// yet (campaignUnpublished), as ProposeAtElection's writes do: its status
// still names the old leader, and a renewal passed on to that one came
// back refused, naming this node, and went round the cluster.
func (n *Node) AwaitElection(ctx context.Context) {
	if !n.campaigning() {
		return
	}
	timer := time.NewTimer(time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval)
	defer timer.Stop()
	for waiting := false; ; waiting = true {
		changed := n.shell.RoleChanged()
		if !n.campaigning() {
			return
		}
		if !waiting {
			n.log.Debug("trace: request waits for the election")
			if n.electionAwaited != nil {
				n.electionAwaited()
			}
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// electionProposer is a Replica that can propose a write on a candidate,
// to be appended the moment it wins the election.
type electionProposer interface {
	// ProposeAtElection proposes cmd if this node is a candidate: it is
	// appended the moment the node wins, in the same write as its first
	// entry, and the result and error are Propose's. proposed is false
	// if the node is no candidate, or did not win within an election
	// timeout: then cmd was appended nowhere, and the caller goes on as
	// for a follower.
	ProposeAtElection(ctx context.Context, cmd Command) (res Result, proposed bool, err error)
}

// ProposeAtElection implements electionProposer. A write that reaches a
// candidate, the leader's successor in a hand-over most often, would wait
// for the outcome (AwaitElection), then be proposed: one write after the
// new leader's first entry, another fsync on the new leader and on a
// follower before it commits. Held in the node instead
// (node.Handler.ProposeAtElection), it is appended with that entry, and
// written, sent and synced with it.
//
// The node's status is published after each of its disk writes, and a
// candidate's first write is its term and vote: for that long (a few
// milliseconds, tens on a busy disk) its status still names the leader
// that told it to campaign. A hand-over's writes reach it just then (the
// stopping leader names it once its vote request arrives), and passed on
// as a follower's they went to the old leader, which refuses them, naming
// this node: the client went round the cluster while the election it was
// waiting for ended. So a node told to campaign (a TimeoutNow came, of
// the term its status still shows) asks its loop, which knows the
// campaign, whether to hold the write.
func (n *Node) ProposeAtElection(ctx context.Context, cmd Command) (Result, bool, error) {
	if !n.campaigning() {
		return Result{}, false, nil
	}
	if n.electionProposed != nil {
		n.electionProposed()
	}
	start := time.Now()
	// Taken before the proposal: a win between the two is not missed.
	changed := n.shell.RoleChanged()
	done, err := n.shell.ProposeAtElectionAsync(ctx, cmd.Marshal())
	if err != nil {
		return Result{}, false, nil // it never reached the loop
	}
	n.log.Debug("trace: write held by the candidate")
	for ; ; changed = n.shell.RoleChanged() {
		select {
		case r := <-done:
			if errors.Is(r.Err, node.ErrNotElected) {
				return Result{}, false, nil
			}
			res, err := proposeAnswer(r)
			return res, true, proposeOutcome(ctx, err)
		case <-changed:
			// The node answers the proposals it held before it publishes
			// a new role: if it lost, done has the answer now.
			if n.shell.Lead() == n.cfg.ID {
				res, err := n.awaitProposal(ctx, done, start)
				return res, true, proposeOutcome(ctx, err)
			}
		case <-ctx.Done():
			// It may be appended yet, if the node wins.
			return Result{}, true, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
		}
	}
}

// campaigning reports whether this node runs an election it may win: it
// is a candidate that knows no leader, or it was told to campaign and its
// status does not show it yet (campaignUnpublished). A pre-candidate, which
// may be a node cut off from the others, is not.
func (n *Node) campaigning() bool {
	if n.campaignUnpublished() {
		return true
	}
	if n.shell.Lead() != 0 {
		return false // a follower of a known leader: the common case, cheap
	}
	st := n.shell.Status()
	return st.Role == raft.Candidate && st.Lead == 0
}

// campaignUnpublished reports whether a leader told this node to campaign
// (TimeoutNow) in the term its status still shows, within the last
// election timeout: the node may be a candidate whose status does not say
// so yet (its term and vote are being written). Past the timeout, or once
// the status shows a later term, the status says how it went.
func (n *Node) campaignUnpublished() bool {
	term, at := n.toldToCampaign.last()
	if term == 0 || time.Since(at) > time.Duration(n.cfg.ElectionTicks)*n.cfg.TickInterval {
		return false
	}
	return n.shell.Status().Term <= term
}

// timeoutNowSeen is the last TimeoutNow that arrived: the term of the
// leader that sent it, and when.
//
// timeoutNowSeen is safe for concurrent use: the transport's readers call
// note, the API's handlers last.
type timeoutNowSeen struct {
	term atomic.Uint64
	at   atomic.Int64 // Unix nanoseconds
}

func (s *timeoutNowSeen) note(term uint64) {
	s.at.Store(time.Now().UnixNano())
	s.term.Store(term)
}

// last returns the term and time of the last TimeoutNow, 0 if none came.
func (s *timeoutNowSeen) last() (term uint64, at time.Time) {
	term = s.term.Load()
	return term, time.Unix(0, s.at.Load())
}

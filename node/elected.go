package node

import (
	"context"
	"fmt"

	"coord/raft"
)

// ErrNotElected is the Err of a proposal made with ProposeAtElection on a
// candidate that did not win (it heard of another leader, went back to
// waiting, or the election took longer than an election timeout), or on a
// node that was no candidate: the proposal was appended nowhere, and the
// caller may take it elsewhere. It wraps raft.ErrNotLeader.
var ErrNotElected = fmt.Errorf("%w: the candidate was not elected", raft.ErrNotLeader)

// maxElectionProposals bounds the proposals a candidate holds; past it
// ProposeAtElection refuses with ErrNotElected (so does past
// HandlerConfig.MaxElectionProposalBytes).
const maxElectionProposals = 4096

// electionProposal is a proposal a candidate holds until the election
// ends.
type electionProposal struct {
	data []byte
	done Waiter
	tick uint64 // Handler.ticks when it came
}

// ProposeAtElection is Propose for a node that may be winning an election:
// on a candidate, the proposal is held until the election ends, and
// proposed the moment this node becomes leader, before the Ready that
// writes the leader's first (empty) entry is made, so that both are
// written, sent and synced together, not one write after the other. A
// leader's successor in a hand-over is a candidate for a round of votes,
// and the writes that reach it meanwhile are the first the new leader
// makes.
//
// done hears how the proposal ended, as for Propose, or ErrNotElected if
// this node did not win within an election timeout (ElectionTicks ticks),
// or was no candidate when the proposal came: then it was appended
// nowhere. On a leader it is Propose.
//
// A candidate that holds maxElectionProposals proposals, or
// HandlerConfig.MaxElectionProposalBytes of entry data, refuses more with
// ErrNotElected, at once, as a follower does: the held ones all go in the
// new leader's first write, which must stay as short as any other batch.
// Refusing, rather than holding the rest for a later Ready, keeps the
// write safe and simple: it was appended nowhere, and the caller retries
// it as it retries a follower's refusal (by then on the new leader, which
// proposes it at once); holding it would need a second queue whose order
// against the leader's later proposals must be kept.
func (h *Handler) ProposeAtElection(data []byte, done Waiter) error {
	if h.stopped != nil {
		return h.stopped
	}
	if h.held {
		return h.StorageErr()
	}
	switch h.core.Status().Role {
	case raft.Leader:
		return h.Propose(data, done) // after those held while it campaigned
	case raft.Candidate:
		if h.canHold(uint64(len(data))) {
			h.hold(electionProposal{data: data, done: done, tick: h.ticks})
			return nil
		}
	}
	return ErrNotElected
}

// canHold reports whether a candidate may hold one more proposal of size
// bytes: within maxElectionProposals, and within maxElectionBytes unless
// it holds none (one is always held, however large, as a batch always
// takes one).
func (h *Handler) canHold(size uint64) bool {
	switch {
	case len(h.atElection) >= maxElectionProposals:
		return false
	case len(h.atElection) == 0 || h.maxElectionBytes == 0:
		return true
	}
	return h.atElectionBytes+size <= h.maxElectionBytes
}

// hold keeps p until the election ends, counting its bytes (canHold).
func (h *Handler) hold(p electionProposal) {
	h.atElection = append(h.atElection, p)
	h.atElectionBytes += uint64(len(p.data))
}

// releaseOnceLeading releases the proposals held during an election if
// this node now leads, ahead of a proposal that comes after its win (in
// the loop round that stepped the winning vote, before Handle): they came
// first, and the loop's batch must count their bytes before it takes
// more, or the new leader's first write could hold its batch bound twice.
func (h *Handler) releaseOnceLeading() {
	if len(h.atElection) > 0 && h.core.Status().Role == raft.Leader {
		h.releaseElectionProposals()
	}
}

// releaseElectionProposals proposes the proposals held during an election
// if this node won it, or refuses them if it did not (or waited an
// election timeout): Handle calls it before it takes a Ready, so that a
// new leader's first Ready carries them beside its empty entry.
func (h *Handler) releaseElectionProposals() {
	if len(h.atElection) == 0 {
		return
	}
	held := h.atElection
	h.atElection, h.atElectionBytes = nil, 0
	switch h.core.Status().Role {
	case raft.Leader:
		for _, p := range held {
			// Propose counts their bytes in the batch, as any other's.
			if err := h.Propose(p.data, p.done); err != nil { // a leadership transfer began already
				p.done(Result{Err: err})
			}
		}
	case raft.Candidate:
		for _, p := range held {
			if h.ticks-p.tick < uint64(h.electionTicks) {
				h.hold(p) // it was within the bounds when it came
				continue
			}
			p.done(Result{Err: ErrNotElected})
		}
	default:
		for _, p := range held {
			p.done(Result{Err: ErrNotElected})
		}
	}
}

// failElectionProposals ends the held proposals with err (Stop).
func (h *Handler) failElectionProposals(err error) {
	held := h.atElection
	h.atElection, h.atElectionBytes = nil, 0
	for _, p := range held {
		p.done(Result{Err: err})
	}
}

// ProposeAtElectionAsync is ProposeAsync with Handler.ProposeAtElection:
// on a candidate the proposal waits for the election's outcome, and is
// written with the new leader's first entry if this node wins; the channel
// receives ErrNotElected if it does not (the proposal went nowhere).
func (n *Node) ProposeAtElectionAsync(ctx context.Context, data []byte) (<-chan Result, error) {
	return n.submitAsync(ctx, func(done Waiter) error { return n.h.ProposeAtElection(data, done) })
}

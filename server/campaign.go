package server

import (
	"context"
	"time"

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
func (n *Node) AwaitElection(ctx context.Context) {
	if n.shell.Lead() != 0 {
		return // a follower of a known leader (the common case: cheap)
	}
	timer := time.NewTimer(time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval)
	defer timer.Stop()
	for {
		changed := n.shell.RoleChanged()
		if st := n.shell.Status(); st.Role != raft.Candidate || st.Lead != 0 {
			return
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

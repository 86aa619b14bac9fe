package node

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"coord/raft"
)

// ProposeAsync returns once the loop took the proposal, not once it ran
// it; Barrier returns once it has: a follower's refusal is on the
// proposal's channel by then (the server reads it so before it starts
// waiting a tick for a deposed leader's proposal).
func TestBarrierWaitsForTheRequestsTakenBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCluster(t, 1, 2, 3)
		leader := c.waitLeader(0)
		ctx := context.Background()
		for id, m := range c.members {
			if m == leader {
				continue
			}
			done, err := m.node.ProposeAsync(ctx, []byte("b=1"))
			if err != nil {
				t.Fatal(err)
			}
			if err := m.node.Barrier(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-done:
				if !errors.Is(r.Err, raft.ErrNotLeader) && !errors.Is(r.Err, raft.ErrProposalDropped) {
					t.Errorf("a proposal on follower %d ended with %+v, want the core's refusal", id, r)
				}
			default:
				t.Errorf("follower %d: no answer on the proposal's channel after Barrier", id)
			}
		}
		c.stop(leader.node.ID())
		if err := leader.node.Barrier(ctx); !errors.Is(err, ErrStopped) {
			t.Errorf("Barrier after Stop = %v, want ErrStopped", err)
		}
	})
}

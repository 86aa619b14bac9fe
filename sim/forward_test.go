package sim

import (
	"fmt"
	"testing"
	"time"

	shell "coord/node"
	"coord/raft"
)

// The workload exercises the answers of the follower path under faults:
// forwarded writes refused by a leader (a transfer, a deposed leader, a
// full log) or lost to another entry at their index, both checked never to
// apply, and follower reads refused by a node that no longer leads.
func TestForwardedAnswersAreExercised(t *testing.T) {
	var total Stats
	for seed := uint64(1); seed <= 100; seed++ {
		res := Run(testConfig(seed))
		if res.Err != nil {
			t.Fatalf("%v", res.Err)
		}
		total.ForwardedRefused += res.Stats.ForwardedRefused
		total.ForwardedLost += res.Stats.ForwardedLost
		total.ReadsRefused += res.Stats.ReadsRefused
	}
	if total.ForwardedRefused == 0 || total.ForwardedLost == 0 || total.ReadsRefused == 0 {
		t.Fatalf("over 100 seeds: %d forwarded writes refused, %d lost, %d read refusals; want some of each",
			total.ForwardedRefused, total.ForwardedLost, total.ReadsRefused)
	}
}

// The checkers catch a wrong answer to a forwarded write: one said refused
// that then applies, and one said applied at an index holding another
// write.
func TestWrongForwardAnswersFailTheRun(t *testing.T) {
	for _, tt := range []struct {
		name  string
		wrong func(s *Sim, n *node, data string)
		check string // the check that fails
	}{
		{"refused, then applied", func(s *Sim, n *node, data string) {
			s.forwardDone(n, data, shell.Result{Err: &shell.RefusedError{Err: fmt.Errorf("%w: a wrong answer", raft.ErrNotLeader)}})
		}, "denied write"},
		{"applied at another write's index", func(s *Sim, n *node, data string) {
			s.forwardDone(n, data, shell.Result{Index: 1})
		}, "forwarded write"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(3)
			cfg.Faults = nil
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			s.start()
			s.advance(2 * time.Second)
			var follower *node
			for _, id := range s.ids {
				if n := s.up(id); n != nil && n.role == raft.Follower {
					follower = n
					break
				}
			}
			if follower == nil {
				t.Fatal("no follower after 2s")
			}
			s.writeSeq++
			data := fmt.Sprintf("w%d", s.writeSeq)
			s.forwardWrite(follower, data, s.now)
			tt.wrong(s, follower, data)
			s.advance(4 * time.Second) // absolute: 2s more

			s.finalChecks()
			if s.failure == nil || s.failure.Check != tt.check {
				t.Fatalf("a wrong answer passed the checkers: %v", s.failure)
			}
		})
	}
}

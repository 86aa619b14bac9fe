package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"coord/raft"
)

// newBookkeeper returns a handler with only what its waiters' bookkeeping
// needs, applied through index applied.
func newBookkeeper(applied uint64) (*Handler, func(index, term uint64) chan Result) {
	h := &Handler{sm: newKV(), applied: applied, reads: map[uint64]Waiter{}}
	wait := func(index, term uint64) chan Result {
		ch := make(chan Result, 1)
		h.await(index, term, func(r Result) { ch <- r })
		return ch
	}
	return h, wait
}

// The review's case, replayed on the waiters' bookkeeping: a deposed leader
// has callers waiting at 9 and 10 (term 2); a new leader truncates its log
// back to 8 (term 3); it leads again in term 4, its empty entry lands at 9
// and a new proposal at 10. Before the fix the new caller's waiter replaced
// the old one at 10, and the old caller waited until its context ended.
// Every caller must get an answer, and the right one.
func TestWaitersOfATruncatedEntryAreAnswered(t *testing.T) {
	h, wait := newBookkeeper(7)
	old9, old10 := wait(9, 2), wait(10, 2)
	new10 := wait(10, 4)
	h.apply([]raft.Entry{{Index: 8, Term: 3}, {Index: 9, Term: 4}}, nil)
	for name, ch := range map[string]chan Result{"9/2": old9, "10/2": old10} {
		select {
		case r := <-ch:
			if !errors.Is(r.Err, ErrProposalLost) {
				t.Errorf("waiter %s: %v, want ErrProposalLost", name, r.Err)
			}
		default:
			t.Errorf("waiter %s is still waiting after entries of term 3 and 4 committed below it", name)
		}
	}
	select {
	case r := <-new10:
		t.Fatalf("the term-4 waiter at 10 was answered before its index was applied: %+v", r)
	default:
	}
	h.apply([]raft.Entry{{Index: 10, Term: 4, Data: []byte("k=v")}}, nil)
	if r := <-new10; r.Err != nil || r.Value != 1 || r.Index != 10 {
		t.Fatalf("the term-4 waiter at 10 got %+v, want the state machine's result 1 at index 10", r)
	}
	if len(h.proposals) != 0 {
		t.Fatalf("waiters left behind: %v", h.proposals)
	}
}

// A waiter above a snapshot whose term is later than the waiter's is lost
// for certain; one at or below the snapshot is of unknown outcome.
func TestSnapshotAnswersWaiters(t *testing.T) {
	h, wait := newBookkeeper(4)
	below, above, current := wait(5, 2), wait(7, 2), wait(8, 3)
	snap := raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 6, Term: 3}, Data: []byte("{}")}
	if err := h.installSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	if r := <-below; !errors.Is(r.Err, ErrOutcomeUnknown) {
		t.Errorf("waiter at 5 under a snapshot at 6: %v, want ErrOutcomeUnknown", r.Err)
	}
	if r := <-above; !errors.Is(r.Err, ErrProposalLost) {
		t.Errorf("term-2 waiter at 7 above a term-3 snapshot at 6: %v, want ErrProposalLost", r.Err)
	}
	if len(h.proposals) != 1 || h.proposals[0].index != 8 || len(current) != 0 {
		t.Errorf("the term-3 waiter at 8 may still commit and must wait: %v", h.proposals)
	}
}

// A leader cut off from its followers appends two proposals; the others
// elect a new leader whose empty entry replaces the first and truncates the
// second. Once that entry is applied, both callers learn at once that
// their proposals are lost, in an idle cluster too. Before the fix, the
// caller at the truncated index waited until its context ended.
func TestDeposedLeadersProposalsFailPromptly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCluster(t, 1, 2, 3)
		old := c.waitLeader(0)
		ctx := context.Background()
		if _, err := old.node.Propose(ctx, []byte("warm=1")); err != nil {
			t.Fatal(err)
		}
		oldID := old.node.ID()
		for id := range c.members {
			if id != oldID {
				c.net.Cut(oldID, id)
			}
		}
		base := old.node.Status().LastIndex
		type answer struct {
			data string
			err  error
		}
		answers := make(chan answer, 2)
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for _, data := range []string{"lost=1", "lost=2"} {
			go func() {
				_, err := old.node.Propose(pctx, []byte(data))
				answers <- answer{data, err}
			}()
		}
		for {
			// Changed before Status: a change in between would be missed.
			changed := old.node.Changed()
			if old.node.Status().LastIndex >= base+2 {
				break
			}
			select {
			case <-changed:
			case a := <-answers:
				t.Fatalf("Propose(%s) returned %v before the leader was cut off", a.data, a.err)
			}
		}
		leader := c.waitLeader(oldID)
		c.net.Heal()
		// Nothing else is proposed: the cluster stays idle.
		for range 2 {
			a := <-answers
			if !errors.Is(a.err, ErrProposalLost) {
				t.Errorf("Propose(%s) on the deposed leader: %v, want ErrProposalLost", a.data, a.err)
			}
		}
		if got := old.sm.get("lost"); got != "" {
			t.Errorf("a lost proposal was applied: lost=%q", got)
		}
		if _, err := leader.node.Propose(ctx, fmt.Appendf(nil, "after=%d", leader.node.ID())); err != nil {
			t.Fatal(err)
		}
	})
}

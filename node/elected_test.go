package node

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"coord/raft"
)

// candidate makes node 1 a candidate (its pre-vote won, its vote requests
// out) and returns the term it campaigns in.
func candidate(t *testing.T, h *Handler) uint64 {
	t.Helper()
	h.Core().Campaign()
	mustHandle(t, h)
	mustStep(t, h, raft.Message{Type: raft.MsgPreVoteResponse, From: 2, To: 1, Term: h.Core().Status().Term + 1})
	st := h.Core().Status()
	if st.Role != raft.Candidate {
		t.Fatalf("node 1 is %v, want a candidate", st.Role)
	}
	return st.Term
}

// winSaves handles what the candidate h took, then steps the vote that
// makes it leader in term, and returns the Saves that followed.
func winSaves(t *testing.T, h *Handler, r *recorder, term uint64) []string {
	t.Helper()
	mustHandle(t, h)
	r.events = nil
	mustStep(t, h, raft.Message{Type: raft.MsgVoteResponse, From: 2, To: 1, Term: term})
	var saves []string
	for _, e := range r.events {
		if strings.HasPrefix(e, "save") {
			saves = append(saves, e)
		}
	}
	return saves
}

// A proposal a candidate holds is written with the new leader's first
// entry: one Save of both, not two in a row; and it applies once committed.
func TestProposeAtElectionRidesWithTheFirstEntry(t *testing.T) {
	h, r := newRecordedHandler(t, func(*recorder) Hooks { return Hooks{} })
	term := candidate(t, h)
	var got []Result
	if err := h.ProposeAtElection([]byte("held"), func(res Result) { got = append(got, res) }); err != nil {
		t.Fatal(err)
	}
	if saves := winSaves(t, h, r, term); len(saves) != 1 || !strings.HasSuffix(saves[0], " entries=2") {
		t.Fatalf("the new leader's saves: %q, want one of its empty entry and the held proposal (entries=2)", saves)
	}
	acknowledge(t, h)
	if len(got) != 1 || got[0].Err != nil || got[0].Value != "held" {
		t.Fatalf("the held proposal ended with %+v, want applied with value \"held\"", got)
	}
}

// A candidate that does not win refuses what it held with ErrNotElected
// (appended nowhere): when it hears of another leader, when it waited an
// election timeout, and a node that is no candidate refuses at once.
func TestProposeAtElectionNotElected(t *testing.T) {
	t.Run("another leader", func(t *testing.T) {
		h, r := newRecordedHandler(t, func(*recorder) Hooks { return Hooks{} })
		term := candidate(t, h)
		var got []Result
		if err := h.ProposeAtElection([]byte("held"), func(res Result) { got = append(got, res) }); err != nil {
			t.Fatal(err)
		}
		mustHandle(t, h)
		if len(got) != 0 {
			t.Fatalf("a candidate answered at once: %+v", got)
		}
		last := h.Core().Status().LastIndex
		mustStep(t, h, raft.Message{Type: raft.MsgHeartbeatRequest, From: 2, To: 1, Term: term})
		if len(got) != 1 || !errors.Is(got[0].Err, ErrNotElected) || !errors.Is(got[0].Err, raft.ErrNotLeader) {
			t.Fatalf("after another leader: %+v, want ErrNotElected", got)
		}
		if st := h.Core().Status(); st.LastIndex != last {
			t.Fatalf("the refused proposal reached the log: last index %d, was %d", st.LastIndex, last)
		}
		_ = r
	})
	// The handler's own timeout, not the core's: the node is still a
	// candidate in the same term when the refusal comes, ElectionTicks
	// ticks after the proposal. (A candidate's core campaigns again after
	// a timeout drawn from [ElectionTicks, 2*ElectionTicks): with
	// pre-vote it becomes a pre-candidate, which refuses what it held
	// anyway; without, it stays a candidate, in a new term, and only the
	// handler's timeout ends the wait. The checks below tell either from
	// the handler's timeout.)
	for _, preVote := range []bool{true, false} {
		t.Run(fmt.Sprintf("election timeout, prevote %v", preVote), func(t *testing.T) {
			h, _ := newRecordedHandlerWith(t, func(*recorder) Hooks { return Hooks{} }, func(hc *HandlerConfig) {
				hc.Raft.PreVote = preVote
			})
			var term uint64
			if preVote {
				term = candidate(t, h)
			} else {
				h.Core().Campaign()
				mustHandle(t, h)
				term = h.Core().Status().Term
			}
			var got []Result
			if err := h.ProposeAtElection([]byte("held"), func(res Result) { got = append(got, res) }); err != nil {
				t.Fatal(err)
			}
			electionTicks := h.electionTicks
			for i := 1; i <= electionTicks; i++ {
				if err := h.Tick(); err != nil {
					t.Fatal(err)
				}
				mustHandle(t, h)
				if st := h.Core().Status(); st.Role != raft.Candidate || st.Term != term {
					t.Fatalf("tick %d: node 1 is %v in term %d, want still a candidate in term %d: the core's timeout came first, and the test checks nothing of the handler's", i, st.Role, st.Term, term)
				}
				if i < electionTicks && len(got) != 0 {
					t.Fatalf("answered %+v after %d ticks, before the election timeout (%d)", got, i, electionTicks)
				}
			}
			if len(got) != 1 || !errors.Is(got[0].Err, ErrNotElected) {
				t.Fatalf("after an election timeout (%d ticks) as a candidate: %+v, want ErrNotElected", electionTicks, got)
			}
		})
	}
	t.Run("a follower", func(t *testing.T) {
		h, _ := newRecordedHandler(t, func(*recorder) Hooks { return Hooks{} })
		err := h.ProposeAtElection([]byte("x"), func(Result) { t.Fatal("a refused proposal was answered") })
		if !errors.Is(err, ErrNotElected) {
			t.Fatalf("ProposeAtElection on a follower: %v, want ErrNotElected", err)
		}
	})
	t.Run("a leader", func(t *testing.T) {
		h, r := newRecordedHandler(t, func(*recorder) Hooks { return Hooks{} })
		elect(t, h, r)
		var got []Result
		if err := h.ProposeAtElection([]byte("now"), func(res Result) { got = append(got, res) }); err != nil {
			t.Fatal(err)
		}
		mustHandle(t, h)
		acknowledge(t, h)
		if len(got) != 1 || got[0].Err != nil || got[0].Value != "now" {
			t.Fatalf("on a leader: %+v, want applied", got)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		h, _ := newRecordedHandler(t, func(*recorder) Hooks { return Hooks{} })
		candidate(t, h)
		var got []Result
		if err := h.ProposeAtElection([]byte("held"), func(res Result) { got = append(got, res) }); err != nil {
			t.Fatal(err)
		}
		h.Stop(nil)
		if len(got) != 1 || !errors.Is(got[0].Err, ErrStopped) {
			t.Fatalf("after Stop: %+v, want ErrStopped", got)
		}
	})
}

// A candidate holds at most MaxElectionProposalBytes of entry data: the
// held proposals all go in the new leader's first write. A proposal past
// the bound is refused at once with ErrNotElected, as a follower refuses,
// and reaches no log; one within it is still held; and the first is held
// however large.
func TestProposeAtElectionBoundedInBytes(t *testing.T) {
	const maxBytes = 10
	limited := func(hc *HandlerConfig) { hc.MaxElectionProposalBytes = maxBytes }
	t.Run("past the bound", func(t *testing.T) {
		h, r := newRecordedHandlerWith(t, func(*recorder) Hooks { return Hooks{} }, limited)
		term := candidate(t, h)
		got := map[string]Result{}
		propose := func(data string) error {
			return h.ProposeAtElection([]byte(data), func(res Result) { got[data] = res })
		}
		for _, data := range []string{"aaaa", "bbbb"} {
			if err := propose(data); err != nil {
				t.Fatalf("holding %q (%d bytes held): %v", data, len(data), err)
			}
		}
		err := propose("ccc") // 11 bytes
		if !errors.Is(err, ErrNotElected) || !errors.Is(err, raft.ErrNotLeader) {
			t.Fatalf("holding 3 bytes more than 8 of %d: %v, want ErrNotElected", maxBytes, err)
		}
		if err := propose("dd"); err != nil { // 10 bytes: within
			t.Fatalf("holding 2 bytes more than 8 of %d: %v", maxBytes, err)
		}
		if saves := winSaves(t, h, r, term); len(saves) != 1 || !strings.HasSuffix(saves[0], " entries=4") {
			t.Fatalf("the new leader's saves: %q, want one of its empty entry and the 3 held proposals (entries=4)", saves)
		}
		acknowledge(t, h)
		for _, data := range []string{"aaaa", "bbbb", "dd"} {
			if res, ok := got[data]; !ok || res.Err != nil || res.Value != data {
				t.Errorf("held %q ended with %+v (answered %v), want applied", data, res, ok)
			}
		}
		if res, ok := got["ccc"]; ok {
			t.Errorf("the refused proposal was answered too: %+v", res)
		}
		entries, err := r.MemoryStorage.Entries(1, h.Core().Status().LastIndex+1, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if string(e.Data) == "ccc" {
				t.Fatalf("the refused proposal reached the log at %d", e.Index)
			}
		}
	})
	// A proposal that comes in the loop round that stepped the winning
	// vote, before Handle, goes after those held, and the batch counts
	// both: otherwise the loop's batch took it and more without counting
	// the held ones, and the first write held its bound twice.
	t.Run("a proposal after the win", func(t *testing.T) {
		h, r := newRecordedHandlerWith(t, func(*recorder) Hooks { return Hooks{} }, limited)
		term := candidate(t, h)
		if err := h.ProposeAtElection([]byte("held456789"), func(Result) {}); err != nil {
			t.Fatal(err)
		}
		mustHandle(t, h)
		if err := h.Step(raft.Message{Type: raft.MsgVoteResponse, From: 2, To: 1, Term: term}); err != nil {
			t.Fatal(err)
		}
		if err := h.Forward([]byte("later56789"), ForwardWaiter{}); err != nil {
			t.Fatal(err)
		}
		if got := h.BatchBytes(); got != 2*maxBytes {
			t.Fatalf("batch bytes %d after the forward, want %d: the held proposal and the forward", got, 2*maxBytes)
		}
		mustHandle(t, h)
		entries, err := r.MemoryStorage.Entries(1, h.Core().Status().LastIndex+1, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		var order []string
		for _, e := range entries {
			if e.Type == raft.EntryNormal && len(e.Data) > 0 {
				order = append(order, string(e.Data))
			}
		}
		if !slices.Equal(order, []string{"held456789", "later56789"}) {
			t.Fatalf("log order %q, want the held proposal first", order)
		}
	})
	t.Run("the first however large", func(t *testing.T) {
		h, _ := newRecordedHandlerWith(t, func(*recorder) Hooks { return Hooks{} }, limited)
		candidate(t, h)
		if err := h.ProposeAtElection(make([]byte, 5*maxBytes), func(Result) {}); err != nil {
			t.Fatalf("holding a first proposal of %d bytes, bound %d: %v", 5*maxBytes, maxBytes, err)
		}
		if err := h.ProposeAtElection([]byte("x"), func(Result) {}); !errors.Is(err, ErrNotElected) {
			t.Fatalf("holding a byte more: %v, want ErrNotElected", err)
		}
	})
}

package raft

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// naiveApplyConfChange is ApplyConfChange written from the rules alone,
// over a map from node to role: leave a joint configuration only with the
// empty change; otherwise apply each change in order to that node's role,
// refuse node 0, unknown types and a result without voters; and keep the
// old voters as the outgoing half when more than one voter changed (not at
// bootstrap, when there were none).
func naiveApplyConfChange(cs ConfState, cc ConfChange) (ConfState, bool) {
	if len(cs.VotersOutgoing) > 0 {
		if len(cc.Changes) > 0 {
			return ConfState{}, false
		}
		return ConfState{Voters: cs.Voters, Learners: cs.Learners}, true
	}
	if len(cc.Changes) == 0 {
		return ConfState{}, false
	}
	const voter, learner = "voter", "learner"
	roles := map[uint64]string{}
	for _, id := range cs.Voters {
		roles[id] = voter
	}
	for _, id := range cs.Learners {
		roles[id] = learner
	}
	for _, c := range cc.Changes {
		if c.NodeID == 0 {
			return ConfState{}, false
		}
		switch c.Type {
		case ConfChangeAddVoter:
			roles[c.NodeID] = voter
		case ConfChangeAddLearner:
			roles[c.NodeID] = learner
		case ConfChangeRemove:
			delete(roles, c.NodeID)
		default:
			return ConfState{}, false
		}
	}
	var out ConfState
	for id, role := range roles {
		if role == voter {
			out.Voters = append(out.Voters, id)
		} else {
			out.Learners = append(out.Learners, id)
		}
	}
	slices.Sort(out.Voters)
	slices.Sort(out.Learners)
	if len(out.Voters) == 0 {
		return ConfState{}, false
	}
	changed := 0
	for id := uint64(1); id <= 64; id++ {
		if slices.Contains(cs.Voters, id) != slices.Contains(out.Voters, id) {
			changed++
		}
	}
	if len(cs.Voters) > 0 && changed > 1 {
		out.VotersOutgoing = cs.Voters
	}
	return out, true
}

// randomConfState draws voters and learners (disjoint) among nodes 1-6,
// sometimes with an outgoing half, sometimes with no voters (bootstrap).
func randomConfState(rng *rand.Rand) ConfState {
	var cs ConfState
	for id := uint64(1); id <= 6; id++ {
		switch rng.IntN(3) {
		case 0:
			cs.Voters = append(cs.Voters, id)
		case 1:
			cs.Learners = append(cs.Learners, id)
		}
	}
	if len(cs.Voters) > 0 && rng.IntN(4) == 0 {
		for id := uint64(1); id <= 6; id++ {
			if rng.IntN(2) == 0 {
				cs.VotersOutgoing = append(cs.VotersOutgoing, id)
			}
		}
	}
	return cs
}

func randomConfChange(rng *rand.Rand) ConfChange {
	var cc ConfChange
	for range rng.IntN(5) {
		// Types 0 and 4 and node 0 are invalid, and drawn now and then.
		cc.Changes = append(cc.Changes, ConfChangeSingle{Type: ConfChangeType(rng.IntN(5)), NodeID: uint64(rng.IntN(7))})
	}
	return cc
}

// ApplyConfChange agrees with the naive model on every random change, and
// what it returns is well formed: sorted, without duplicates, no node both
// voter and learner; on refusal, the configuration it was given and
// ErrInvalidConfChange.
func TestQuickApplyConfChange(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for i := range 50000 {
		cs, cc := randomConfState(rng), randomConfChange(rng)
		got, err := ApplyConfChange(cs, cc)
		want, ok := naiveApplyConfChange(cs, cc)
		switch {
		case ok && err != nil:
			t.Fatalf("case %d: %v + %+v: refused (%v), naive model gives %v", i, cs, cc.Changes, err, want)
		case !ok && err == nil:
			t.Fatalf("case %d: %v + %+v = %v, naive model refuses", i, cs, cc.Changes, got)
		case !ok && (!errors.Is(err, ErrInvalidConfChange) || !got.Equal(cs)):
			t.Fatalf("case %d: %v + %+v refused with (%v, %v), want the input and ErrInvalidConfChange", i, cs, cc.Changes, got, err)
		case ok && !got.Equal(want):
			t.Fatalf("case %d: %v + %+v = %v, naive model %v", i, cs, cc.Changes, got, want)
		}
		for _, ids := range [][]uint64{got.Voters, got.Learners, got.VotersOutgoing} {
			if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
				t.Fatalf("case %d: %v is not sorted and distinct", i, got)
			}
		}
		for _, id := range got.Voters {
			if got.IsLearner(id) {
				t.Fatalf("case %d: node %d is both voter and learner in %v", i, id, got)
			}
		}
	}
}

package quorum

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The clever implementations checked against naive ones over many random
// configurations, as etcd's quorum/quick_test.go does. The naive versions
// follow the definitions word for word: a majority is more than half, the
// committed index is the largest index enough voters hold, and an election
// is won when it is won whatever the missing votes turn out to be, lost
// when it is lost whatever they turn out to be.

const quickConfigs = 20000

// randomVoters returns up to max voters with IDs drawn from [1, 2*max],
// and, from the same ID space, the acknowledged indexes and votes.
func randomVoters(rng *rand.Rand, max int) Majority {
	n := rng.IntN(max + 1)
	var m Majority
	for len(m) < n {
		id := uint64(rng.IntN(2*max) + 1)
		if !m.Contains(id) {
			m = append(m, id)
		}
	}
	return m
}

func randomAcked(rng *rand.Rand, max int) map[uint64]uint64 {
	acked := map[uint64]uint64{}
	for id := uint64(1); id <= uint64(2*max); id++ {
		if rng.IntN(4) > 0 { // some voters have acknowledged nothing
			acked[id] = uint64(rng.IntN(10))
		}
	}
	return acked
}

func randomVotes(rng *rand.Rand, max int) map[uint64]bool {
	votes := map[uint64]bool{}
	for id := uint64(1); id <= uint64(2*max); id++ {
		switch rng.IntN(3) {
		case 0: // not yet answered
		case 1:
			votes[id] = true
		default:
			votes[id] = false
		}
	}
	return votes
}

// naiveCommitted is the largest index that more than half of the voters
// have acknowledged (0 when there is none), found by trying every index.
func naiveCommitted(voters []uint64, acked map[uint64]uint64) uint64 {
	var best uint64
	for _, candidate := range acked {
		holders := 0
		for _, id := range voters {
			if acked[id] >= candidate {
				holders++
			}
		}
		if 2*holders > len(voters) && candidate > best {
			best = candidate
		}
	}
	return best
}

// naiveWins reports whether the granted votes are more than half of the
// voters.
func naiveWins(voters []uint64, votes map[uint64]bool) bool {
	granted := 0
	for _, id := range voters {
		if votes[id] {
			granted++
		}
	}
	return 2*granted > len(voters)
}

// naiveResult tries every way the unanswered voters could answer: won if
// every way wins, lost if none does, pending otherwise. wins decides one
// complete set of votes.
func naiveResult(ids []uint64, votes map[uint64]bool, wins func(map[uint64]bool) bool) VoteResult {
	var missing []uint64
	for _, id := range ids {
		if _, ok := votes[id]; !ok {
			missing = append(missing, id)
		}
	}
	won, lost := 0, 0
	for mask := 0; mask < 1<<len(missing); mask++ {
		complete := map[uint64]bool{}
		for id, v := range votes {
			complete[id] = v
		}
		for i, id := range missing {
			complete[id] = mask&(1<<i) != 0
		}
		if wins(complete) {
			won++
		} else {
			lost++
		}
	}
	switch {
	case lost == 0:
		return VoteWon
	case won == 0:
		return VoteLost
	default:
		return VotePending
	}
}

func TestQuickMajorityCommittedIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range quickConfigs {
		m, acked := randomVoters(rng, 9), randomAcked(rng, 9)
		got := m.CommittedIndex(func(id uint64) uint64 { return acked[id] })
		if want := naiveCommitted(m, acked); got != want {
			t.Fatalf("config %d: %v with acked %v: CommittedIndex %d, naive %d", i, m, acked, got, want)
		}
	}
}

func TestQuickJointCommittedIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range quickConfigs {
		j := Joint{Incoming: randomVoters(rng, 7), Outgoing: randomVoters(rng, 7)}
		acked := randomAcked(rng, 7)
		got := j.CommittedIndex(func(id uint64) uint64 { return acked[id] })
		// The largest index both halves hold by majority; an empty outgoing
		// half means no joint configuration, so it does not constrain.
		var want uint64
		for _, candidate := range append([]uint64{0}, valuesOf(acked)...) {
			inHalf := func(voters []uint64) bool {
				holders := 0
				for _, id := range voters {
					if acked[id] >= candidate {
						holders++
					}
				}
				return 2*holders > len(voters)
			}
			if inHalf(j.Incoming) && (len(j.Outgoing) == 0 || inHalf(j.Outgoing)) && candidate > want {
				want = candidate
			}
		}
		if got != want {
			t.Fatalf("config %d: %v with acked %v: CommittedIndex %d, naive %d", i, j, acked, got, want)
		}
	}
}

func TestQuickMajorityVoteResult(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range quickConfigs {
		m, votes := randomVoters(rng, 9), randomVotes(rng, 9)
		got := m.VoteResult(votes)
		want := naiveResult(m, votes, func(v map[uint64]bool) bool { return naiveWins(m, v) })
		if got != want {
			t.Fatalf("config %d: %v with votes %v: VoteResult %v, naive %v", i, m, votes, got, want)
		}
	}
}

func TestQuickJointVoteResult(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range quickConfigs {
		j := Joint{Incoming: randomVoters(rng, 6), Outgoing: randomVoters(rng, 6)}
		votes := randomVotes(rng, 6)
		got := j.VoteResult(votes)
		want := naiveResult(j.IDs(), votes, func(v map[uint64]bool) bool {
			return naiveWins(j.Incoming, v) && (len(j.Outgoing) == 0 || naiveWins(j.Outgoing, v))
		})
		if got != want {
			t.Fatalf("config %d: %v with votes %v: VoteResult %v, naive %v", i, j, votes, got, want)
		}
	}
}

// The committed index and the vote tally agree: an index is committed
// exactly when the voters holding it would win an election.
func TestQuickCommittedIndexIsAWinningVote(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range quickConfigs {
		j := Joint{Incoming: randomVoters(rng, 7), Outgoing: randomVoters(rng, 7)}
		if len(j.Incoming) == 0 {
			continue
		}
		acked := randomAcked(rng, 7)
		committed := j.CommittedIndex(func(id uint64) uint64 { return acked[id] })
		holders := func(index uint64) map[uint64]bool {
			v := map[uint64]bool{}
			for _, id := range j.IDs() {
				v[id] = acked[id] >= index
			}
			return v
		}
		if committed > 0 && j.VoteResult(holders(committed)) != VoteWon {
			t.Fatalf("config %d: %v acked %v: index %d is committed, yet its holders do not win", i, j, acked, committed)
		}
		if j.VoteResult(holders(committed+1)) == VoteWon {
			t.Fatalf("config %d: %v acked %v: the holders of %d win, yet only %d is committed", i, j, acked, committed+1, committed)
		}
	}
}

func valuesOf(m map[uint64]uint64) []uint64 {
	var vs []uint64
	for _, v := range m {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs
}

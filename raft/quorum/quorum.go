package quorum

import (
	"slices"
	"strconv"
	"strings"
)

// VoteResult is the outcome of an election so far.
type VoteResult uint8

const (
	// VotePending means neither a majority for nor a majority against has
	// been reached yet.
	VotePending VoteResult = iota + 1
	// VoteLost means a majority of voters refused.
	VoteLost
	// VoteWon means a majority of voters granted.
	VoteWon
)

// String returns the result's name.
func (v VoteResult) String() string {
	switch v {
	case VotePending:
		return "pending"
	case VoteLost:
		return "lost"
	case VoteWon:
		return "won"
	default:
		return "unknown"
	}
}

// Majority is a set of voter IDs. A decision needs more than half of them.
// The zero value is the empty set, which never wins anything.
//
// Majority is a value type: its methods do not modify it and are safe for
// concurrent use.
type Majority []uint64

// Size returns how many voters make a majority: floor(n/2)+1.
func (m Majority) Size() int { return len(m)/2 + 1 }

// Contains reports whether id is a voter.
func (m Majority) Contains(id uint64) bool { return slices.Contains(m, id) }

// String lists the voters in ascending order, e.g. "(1 2 3)".
func (m Majority) String() string {
	ids := slices.Clone(m)
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatUint(id, 10)
	}
	return "(" + strings.Join(parts, " ") + ")"
}

// CommittedIndex returns the largest index that a majority of voters has
// acknowledged, where acked(id) is the highest index voter id has stored.
// It returns 0 for the empty set: nothing is committed without voters.
func (m Majority) CommittedIndex(acked func(id uint64) uint64) uint64 {
	if len(m) == 0 {
		return 0
	}
	// Sort the acknowledged indexes in descending order; the value at
	// position Size()-1 is stored on at least Size() voters.
	var stack [7]uint64
	indexes := stack[:0]
	if len(m) > len(stack) {
		indexes = make([]uint64, 0, len(m))
	}
	for _, id := range m {
		indexes = append(indexes, acked(id))
	}
	slices.SortFunc(indexes, func(a, b uint64) int {
		switch {
		case a > b:
			return -1
		case a < b:
			return 1
		}
		return 0
	})
	return indexes[m.Size()-1]
}

// VoteResult tallies votes (true: granted, false: refused; absent: not yet
// answered) among the voters; votes from non-voters are ignored.
func (m Majority) VoteResult(votes map[uint64]bool) VoteResult {
	if len(m) == 0 {
		return VoteLost
	}
	granted, refused := 0, 0
	for _, id := range m {
		v, ok := votes[id]
		switch {
		case !ok:
		case v:
			granted++
		default:
			refused++
		}
	}
	need := m.Size()
	switch {
	case granted >= need:
		return VoteWon
	case refused > len(m)-need:
		return VoteLost
	default:
		return VotePending
	}
}

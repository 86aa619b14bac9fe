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
	// Sort the acknowledged indexes; the Size()-th largest is stored on at
	// least Size() voters.
	var stack [7]uint64
	indexes := stack[:0]
	if len(m) > len(stack) {
		indexes = make([]uint64, 0, len(m))
	}
	for _, id := range m {
		indexes = append(indexes, acked(id))
	}
	slices.Sort(indexes)
	return indexes[len(indexes)-m.Size()]
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

// Joint is the voter configuration during a joint-consensus change
// (dissertation §4.3): every decision needs a majority of the incoming
// voters and a majority of the outgoing ones. With no outgoing voters it is
// a plain majority of the incoming ones.
//
// Joint is a value type: its methods do not modify it and are safe for
// concurrent use.
type Joint struct {
	Incoming Majority
	Outgoing Majority
}

// IsJoint reports whether there are outgoing voters.
func (j Joint) IsJoint() bool { return len(j.Outgoing) > 0 }

// Contains reports whether id votes in either configuration.
func (j Joint) Contains(id uint64) bool { return j.Incoming.Contains(id) || j.Outgoing.Contains(id) }

// IDs returns the voters of both configurations, ascending, without
// duplicates.
func (j Joint) IDs() []uint64 {
	ids := append(slices.Clone(j.Incoming), j.Outgoing...)
	slices.Sort(ids)
	return slices.Compact(ids)
}

// String formats the configuration, e.g. "(1 2 3)&&(1 2 4)".
func (j Joint) String() string {
	if !j.IsJoint() {
		return j.Incoming.String()
	}
	return j.Incoming.String() + "&&" + j.Outgoing.String()
}

// CommittedIndex returns the largest index acknowledged by a majority of
// both configurations.
func (j Joint) CommittedIndex(acked func(id uint64) uint64) uint64 {
	c := j.Incoming.CommittedIndex(acked)
	if !j.IsJoint() {
		return c
	}
	return min(c, j.Outgoing.CommittedIndex(acked))
}

// VoteResult is won when both configurations are won, lost when either is
// lost, pending otherwise.
func (j Joint) VoteResult(votes map[uint64]bool) VoteResult {
	a := j.Incoming.VoteResult(votes)
	if !j.IsJoint() {
		return a
	}
	b := j.Outgoing.VoteResult(votes)
	switch {
	case a == b:
		return a
	case a == VoteLost || b == VoteLost:
		return VoteLost
	default:
		return VotePending
	}
}

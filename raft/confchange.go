package raft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// ConfChangeType says what a ConfChangeSingle does to one node.
type ConfChangeType uint8

const (
	// ConfChangeAddVoter makes a node a voter. Outside bootstrap the node
	// must already be a learner that has caught up (dissertation §4.2.1).
	ConfChangeAddVoter ConfChangeType = iota + 1
	// ConfChangeAddLearner adds a non-voting member, or demotes a voter.
	ConfChangeAddLearner
	// ConfChangeRemove removes a node, voter or learner.
	ConfChangeRemove
)

// String returns the change's name.
func (t ConfChangeType) String() string {
	switch t {
	case ConfChangeAddVoter:
		return "add-voter"
	case ConfChangeAddLearner:
		return "add-learner"
	case ConfChangeRemove:
		return "remove"
	default:
		return fmt.Sprintf("ConfChangeType(%d)", uint8(t))
	}
}

// ConfChangeSingle changes the role of one node.
type ConfChangeSingle struct {
	Type   ConfChangeType
	NodeID uint64
}

// ConfChange is a membership change: the Data of an EntryConfChange entry.
// coord changes membership one voter at a time (dissertation §4.1): any
// number of learner changes, but at most one node may join or leave the
// voters, so that every majority of the old voters intersects every
// majority of the new ones.
type ConfChange struct {
	Changes []ConfChangeSingle
	// Context is opaque to the core; the application can carry, say, the
	// new node's address in it.
	Context []byte
}

// confChangeVersion is the first byte of an encoded ConfChange.
const confChangeVersion = 1

// errMalformedConfChange is wrapped in decoding errors.
var errMalformedConfChange = errors.New("malformed")

// Marshal encodes the change: a version byte, the number of changes, each
// change as a type byte and a uvarint node ID, then the context's length
// and bytes.
func (cc ConfChange) Marshal() []byte {
	buf := make([]byte, 0, 2+len(cc.Changes)*(1+binary.MaxVarintLen64)+binary.MaxVarintLen64+len(cc.Context))
	buf = append(buf, confChangeVersion)
	buf = binary.AppendUvarint(buf, uint64(len(cc.Changes)))
	for _, c := range cc.Changes {
		buf = append(buf, byte(c.Type))
		buf = binary.AppendUvarint(buf, c.NodeID)
	}
	buf = binary.AppendUvarint(buf, uint64(len(cc.Context)))
	return append(buf, cc.Context...)
}

// UnmarshalConfChange decodes what ConfChange.Marshal encoded. Errors wrap
// ErrInvalidConfChange.
func UnmarshalConfChange(data []byte) (ConfChange, error) {
	fail := func(what string) (ConfChange, error) {
		return ConfChange{}, fmt.Errorf("%w: %w: %s", ErrInvalidConfChange, errMalformedConfChange, what)
	}
	if len(data) == 0 || data[0] != confChangeVersion {
		return fail("unknown version")
	}
	rest := data[1:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)) {
		return fail("change count")
	}
	rest = rest[k:]
	var cc ConfChange
	for range n {
		if len(rest) == 0 {
			return fail("truncated change")
		}
		t := ConfChangeType(rest[0])
		id, k := binary.Uvarint(rest[1:])
		if k <= 0 {
			return fail("node ID")
		}
		cc.Changes = append(cc.Changes, ConfChangeSingle{Type: t, NodeID: id})
		rest = rest[1+k:]
	}
	size, k := binary.Uvarint(rest)
	if k <= 0 || size != uint64(len(rest)-k) {
		return fail("context length")
	}
	if size > 0 {
		cc.Context = slices.Clone(rest[k:])
	}
	return cc, nil
}

// ApplyConfChange returns the membership that results from applying cc to
// cs, or an error wrapping ErrInvalidConfChange if the change is not
// allowed: unknown type, node ID 0, more than one voter changing (except
// when cs has no voters: bootstrap), or no voters left. It is pure; the core
// and the application use it alike, so they agree on every membership.
func ApplyConfChange(cs ConfState, cc ConfChange) (ConfState, error) {
	if len(cs.VotersOutgoing) != 0 {
		return cs, fmt.Errorf("%w: joint configurations are not supported", ErrInvalidConfChange)
	}
	voters, learners := slices.Clone(cs.Voters), slices.Clone(cs.Learners)
	for _, c := range cc.Changes {
		if c.NodeID == 0 {
			return cs, fmt.Errorf("%w: node ID 0", ErrInvalidConfChange)
		}
		voters = slices.DeleteFunc(voters, func(id uint64) bool { return id == c.NodeID })
		learners = slices.DeleteFunc(learners, func(id uint64) bool { return id == c.NodeID })
		switch c.Type {
		case ConfChangeAddVoter:
			voters = append(voters, c.NodeID)
		case ConfChangeAddLearner:
			learners = append(learners, c.NodeID)
		case ConfChangeRemove:
		default:
			return cs, fmt.Errorf("%w: unknown change type %d", ErrInvalidConfChange, c.Type)
		}
	}
	slices.Sort(voters)
	slices.Sort(learners)
	out := ConfState{Voters: voters, Learners: learners}
	if len(out.Voters) == 0 {
		return cs, fmt.Errorf("%w: no voters left", ErrInvalidConfChange)
	}
	if len(cs.Voters) > 0 && votersChanged(cs.Voters, out.Voters) > 1 {
		return cs, fmt.Errorf("%w: %d voters change at once; change one at a time (dissertation §4.1)",
			ErrInvalidConfChange, votersChanged(cs.Voters, out.Voters))
	}
	return out, nil
}

// votersChanged counts the IDs in exactly one of the two sets.
func votersChanged(a, b []uint64) int {
	n := 0
	for _, id := range a {
		if !slices.Contains(b, id) {
			n++
		}
	}
	for _, id := range b {
		if !slices.Contains(a, id) {
			n++
		}
	}
	return n
}

// Equal reports whether two membership configurations are the same.
func (cs ConfState) Equal(other ConfState) bool {
	return slices.Equal(cs.Voters, other.Voters) && slices.Equal(cs.Learners, other.Learners) &&
		slices.Equal(cs.VotersOutgoing, other.VotersOutgoing)
}

// String formats the configuration, e.g. "voters=(1 2 3) learners=(4)".
func (cs ConfState) String() string {
	s := fmt.Sprintf("voters=%v", fmtIDs(cs.Voters))
	if len(cs.Learners) > 0 {
		s += fmt.Sprintf(" learners=%v", fmtIDs(cs.Learners))
	}
	return s
}

func fmtIDs(ids []uint64) string {
	s := "("
	for i, id := range ids {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprint(id)
	}
	return s + ")"
}

// IsVoter reports whether id is a voter in cs.
func (cs ConfState) IsVoter(id uint64) bool { return slices.Contains(cs.Voters, id) }

// IsLearner reports whether id is a learner in cs.
func (cs ConfState) IsLearner(id uint64) bool { return slices.Contains(cs.Learners, id) }

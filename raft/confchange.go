package raft

import (
	"encoding/binary"
	"fmt"
	"slices"

	"coord/internal/wire"
	"coord/raft/quorum"
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
//
// A change that adds or removes at most one voter (and any number of
// learners) takes effect directly: every majority of the old voters
// intersects every majority of the new ones (dissertation §4.1). A change of
// more voters at once goes through joint consensus (§4.3): the resulting
// configuration keeps the old voters as VotersOutgoing, and decisions need
// a majority of both; once that entry commits, the leader proposes the
// empty ConfChange, which leaves the joint configuration.
type ConfChange struct {
	Changes []ConfChangeSingle
	// Context is opaque to the core; the application can carry, say, the
	// new node's address in it.
	Context []byte
}

// confChangeVersion is the first byte of an encoded ConfChange.
const confChangeVersion = 1

// errMalformedConfChange is wrapped in decoding errors.
var errMalformedConfChange = fmt.Errorf("%w: malformed", ErrInvalidConfChange)

// Marshal encodes the change with the project's binary encoding
// (internal/wire): a version byte, the number of changes, each change as a
// type byte and a uvarint node ID, then the context, length-prefixed.
func (cc ConfChange) Marshal() []byte {
	e := wire.Encoder{Buf: make([]byte, 0, 2+len(cc.Changes)*(1+binary.MaxVarintLen64)+binary.MaxVarintLen64+len(cc.Context))}
	e.Byte(confChangeVersion)
	e.Uvarint(uint64(len(cc.Changes)))
	for _, c := range cc.Changes {
		e.Byte(byte(c.Type))
		e.Uvarint(c.NodeID)
	}
	e.Bytes(cc.Context)
	return e.Buf
}

// UnmarshalConfChange decodes what ConfChange.Marshal encoded. Errors wrap
// ErrInvalidConfChange.
func UnmarshalConfChange(data []byte) (ConfChange, error) {
	d := wire.NewDecoder(data, errMalformedConfChange)
	if d.Byte("version") != confChangeVersion {
		d.Fail("unknown version")
	}
	var cc ConfChange
	for range d.Count("change count", len(data)) {
		t := ConfChangeType(d.Byte("change type"))
		cc.Changes = append(cc.Changes, ConfChangeSingle{Type: t, NodeID: d.Uvarint("node ID")})
	}
	cc.Context = d.Bytes("context", len(data))
	if err := d.Done(); err != nil {
		return ConfChange{}, err
	}
	return cc, nil
}

// ApplyConfChange returns the membership that results from applying cc to
// cs, or an error wrapping ErrInvalidConfChange if the change is not
// allowed: unknown type, node ID 0, no voters left, an empty change outside
// a joint configuration or a non-empty one inside it. If more than one
// voter changes (outside bootstrap, when cs has no voters), the result is a
// joint configuration. It is pure; the core and the application use it
// alike, so they agree on every membership.
func ApplyConfChange(cs ConfState, cc ConfChange) (ConfState, error) {
	if cs.IsJoint() {
		if len(cc.Changes) != 0 {
			return cs, fmt.Errorf("%w: a joint configuration can only be left (the empty change), not changed", ErrInvalidConfChange)
		}
		return ConfState{Voters: slices.Clone(cs.Voters), Learners: slices.Clone(cs.Learners)}, nil
	}
	if len(cc.Changes) == 0 {
		return cs, fmt.Errorf("%w: no change, and no joint configuration to leave", ErrInvalidConfChange)
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
		// Joint consensus: old and new voters decide together until the
		// leader leaves the joint configuration (§4.3).
		out.VotersOutgoing = slices.Clone(cs.Voters)
	}
	return out, nil
}

// IsJoint reports whether cs is a joint configuration (it has outgoing
// voters).
func (cs ConfState) IsJoint() bool { return len(cs.VotersOutgoing) > 0 }

// IsMember reports whether id votes in either half of cs or is a learner.
func (cs ConfState) IsMember(id uint64) bool {
	return cs.IsVoter(id) || slices.Contains(cs.VotersOutgoing, id) || cs.IsLearner(id)
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
	s := "voters=" + quorum.Majority(cs.Voters).String()
	if cs.IsJoint() {
		s += "&&" + quorum.Majority(cs.VotersOutgoing).String()
	}
	if len(cs.Learners) > 0 {
		s += " learners=" + quorum.Majority(cs.Learners).String()
	}
	return s
}

// IsVoter reports whether id is an (incoming) voter in cs.
func (cs ConfState) IsVoter(id uint64) bool { return slices.Contains(cs.Voters, id) }

// IsLearner reports whether id is a learner in cs.
func (cs ConfState) IsLearner(id uint64) bool { return slices.Contains(cs.Learners, id) }

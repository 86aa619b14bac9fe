package raft

import "errors"

// Errors returned by the core's methods. Storage errors are in storage.go.
var (
	// ErrInvalidConfig wraps every Config.Validate failure; the message
	// names the field.
	ErrInvalidConfig = errors.New("raft: invalid config")
	// ErrNotLeader means the call needs the leader and this node is not it.
	ErrNotLeader = errors.New("raft: not leader")
	// ErrProposalDropped means the leader refused a proposal for now (a
	// leadership transfer is in progress, or the uncommitted log is over
	// Config.MaxUncommittedBytes); retry later.
	ErrProposalDropped = errors.New("raft: proposal dropped")
	// ErrForwardUnanswered means a proposal a follower forwarded got no
	// answer from the leader in time (Forward): it may or may not have
	// been appended.
	ErrForwardUnanswered = errors.New("raft: forwarded proposal unanswered")
	// ErrConfChangePending means another membership change, or the leader's
	// first entry of its term, is not committed yet (dissertation §4.1).
	ErrConfChangePending = errors.New("raft: membership change pending")
	// ErrInvalidConfChange means the change is malformed or not allowed
	// from the current configuration (e.g. two voters at once, no voters
	// left).
	ErrInvalidConfChange = errors.New("raft: invalid membership change")
	// ErrNotCaughtUp means a node would become a voter before it caught up
	// as a learner (dissertation §4.2.1).
	ErrNotCaughtUp = errors.New("raft: learner has not caught up")
	// ErrInvalidMessage means Step was given a message that no correct
	// peer sends (unknown type, wrong recipient, no sender or this node as
	// sender, term 0, entries that do not follow one another, a rejecting
	// snapshot response, a second leader's message in one term, an
	// acknowledgement of what the leader never sent); the message was
	// ignored.
	ErrInvalidMessage = errors.New("raft: invalid message")
	// ErrTransferTarget means a leadership transfer named a node that
	// cannot lead (unknown, or not a voter).
	ErrTransferTarget = errors.New("raft: invalid leadership transfer target")
)

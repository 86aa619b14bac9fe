package server

import (
	"context"
	"errors"
	"time"

	"coord/api"
)

// Errors a Replica returns; the API maps them to HTTP statuses.
var (
	// ErrNotLeader means the call needs the leader and this node is not it
	// (or knows of none). The API forwards the request to the leader.
	ErrNotLeader = errors.New("server: not leader")
	// ErrStopped means the node is shutting down.
	ErrStopped = errors.New("server: stopped")
	// ErrInvalid means a request was malformed; the message says how.
	ErrInvalid = errors.New("server: invalid request")
)

// View is a read-only look at a node's state machine, valid only during
// the function Replica.View calls.
type View interface {
	// Get returns the key and whether it exists.
	Get(key string) (KeyValue, bool)
	// Lease returns the lease record of name.
	Lease(name string) Lease
	// Remaining returns how long the lease has left by this node's clock,
	// and whether this node is the leader and so its clock decides.
	Remaining(name string) (time.Duration, bool)
	// Token returns the API token whose hash is hash, and whether there
	// is one.
	Token(hash [TokenHashBytes]byte) (Token, bool)
	// Tokens returns every API token, by ID.
	Tokens() []Token
}

// Replica is the node an API serves: one member of the replicated state
// machine. The cluster node (Node) implements it; tests of the HTTP layer
// use a one-process fake.
//
// Implementations are safe for concurrent use.
type Replica interface {
	// Propose replicates cmd and returns its result once this node has
	// applied it. ErrNotLeader if this node is not the leader. On a
	// context error the outcome is unknown: the command may still apply.
	Propose(ctx context.Context, cmd Command) (Result, error)

	// ReadBarrier returns once this node's state machine reflects every
	// write committed before the call: a linearizable read point (Raft
	// dissertation §6.4, ReadIndex). ErrNotLeader if it cannot say.
	ReadBarrier(ctx context.Context) error

	// View calls fn with the local state machine, under a lock that keeps
	// it still. fn must not block.
	View(fn func(View))

	// Changed returns a channel that is closed at the next change of the
	// applied state.
	Changed() <-chan struct{}

	// ChangedOf returns a channel that is closed at the next change of w
	// (a key or a lease), for watches: a write wakes only the watches of
	// what it changed. It may also close without a change; a watch looks
	// again and waits again.
	ChangedOf(w Watched) <-chan struct{}

	// Status returns this node's view of the cluster.
	Status() api.NodeStatus

	// Leader returns this node's ID and the leader it knows of (0: none),
	// as Status does, but cheaply: every request asks it, so it takes no
	// lock the state machine's apply needs and builds no member list.
	Leader() (self, leader uint64)

	// AddMember adds a node with the given peer address, first as a
	// learner that catches up, then as a voter.
	AddMember(ctx context.Context, id uint64, peer string) error

	// RemoveMember removes a node from the cluster.
	RemoveMember(ctx context.Context, id uint64) error
}

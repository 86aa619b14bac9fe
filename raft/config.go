package raft

import "fmt"

// Rand is the source of randomness the core needs: randomized election
// timeouts (Raft §5.2) and where a follower's read index requests start
// numbering. *math/rand/v2.Rand satisfies it. Injecting it keeps
// the core deterministic: one seed, one run.
type Rand interface {
	// IntN returns a uniform integer in [0, n). n > 0.
	IntN(n int) int
}

// Config configures one node's core. Start from DefaultConfig.
type Config struct {
	// ID identifies this node; never 0 (0 means "none" in votes and
	// leaders).
	ID uint64
	// Storage is read for the persisted log and hard state. The caller
	// writes to it what each Ready asks for.
	Storage Storage
	// Rand draws election timeouts and the first number of a follower's
	// read index requests. Required. A node's restarts must not replay
	// the same sequence (seed it from crypto/rand, or from the seed and
	// the run): an answer to an earlier run's request, delayed across a
	// restart, is told apart from this run's by the number alone.
	Rand Rand
	// Peers, for a brand-new node whose Storage is empty, is the initial
	// voter set: the core then writes it as the first log entry (index 1,
	// term 1), identically on every initial member. Leave it empty on a
	// node that joins an existing cluster or restarts.
	Peers []uint64

	// ElectionTicks is the minimum election timeout in ticks; each timeout
	// is drawn from [ElectionTicks, 2*ElectionTicks) (Raft §5.2, §9.3).
	ElectionTicks int
	// HeartbeatTicks is the leader's heartbeat interval in ticks. Validate
	// requires it below ElectionTicks; keep it well below (a tenth is
	// usual), so that a follower hears several heartbeats per election
	// timeout and one or two lost ones do not start an election.
	HeartbeatTicks int
	// Applied is the last index the application's state machine already
	// holds on restart (0: the snapshot index).
	Applied uint64

	// MaxAppendBytes bounds the entry data in one AppendRequest, in bytes
	// (at least one entry is always sent, however large).
	MaxAppendBytes uint64
	// MaxInflightMsgs bounds the AppendRequests carrying entries that a
	// leader has sent to one replicating follower and not seen
	// acknowledged: no append with entries goes while this many are
	// unacknowledged. Only an acknowledgement, or a change to probing,
	// frees one; a heartbeat answer under a full window gets the follower
	// one empty append per heartbeat interval instead, which carries no
	// entries and finds out whether acknowledgements were lost.
	MaxInflightMsgs int
	// MaxInflightBytes bounds, the same way, the entry data of those
	// appends: no append goes while the unacknowledged ones hold this
	// much, so at most MaxInflightBytes plus one append's are
	// unacknowledged (an append holds at least one entry, however
	// large). With large entries the count bound alone would let
	// MaxInflightMsgs of them, hundreds of MB, queue on the connection
	// ahead of heartbeats. 0 means no bound but MaxInflightMsgs; else it
	// must be at least MaxAppendBytes.
	MaxInflightBytes uint64
	// MaxUncommittedBytes bounds the entry data a leader holds uncommitted;
	// proposals past it get ErrProposalDropped. 0 means no limit.
	MaxUncommittedBytes uint64
	// MaxCommittedBytesPerReady bounds the committed entry data handed to
	// the application in one Ready (at least one entry). 0 means no limit.
	MaxCommittedBytesPerReady uint64

	// PreVote makes a node ask whether it could win before it disrupts the
	// cluster with a higher term (dissertation §9.6).
	PreVote bool
	// CheckQuorum makes a leader step down when it has not heard from a
	// quorum within an election timeout, and makes followers ignore vote
	// requests while they hear from a leader (dissertation §6.2, §4.2.3).
	CheckQuorum bool
}

// DefaultConfig returns a Config with coord's defaults: elections after 10
// to 20 ticks, heartbeats every tick, pre-vote and check-quorum on. ID,
// Storage and Rand are left for the caller.
func DefaultConfig() Config {
	return Config{
		ElectionTicks:             10,
		HeartbeatTicks:            1,
		MaxAppendBytes:            1 << 20,
		MaxInflightMsgs:           256,
		MaxInflightBytes:          8 << 20,
		MaxUncommittedBytes:       64 << 20,
		MaxCommittedBytesPerReady: 16 << 20,
		PreVote:                   true,
		CheckQuorum:               true,
	}
}

// Validate reports the first field that is missing or out of range, as an
// error wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case c.ID == 0:
		return fmt.Errorf("%w: ID must not be 0", ErrInvalidConfig)
	case c.Storage == nil:
		return fmt.Errorf("%w: Storage is nil", ErrInvalidConfig)
	case c.Rand == nil:
		return fmt.Errorf("%w: Rand is nil", ErrInvalidConfig)
	case c.HeartbeatTicks <= 0:
		return fmt.Errorf("%w: HeartbeatTicks %d must be positive", ErrInvalidConfig, c.HeartbeatTicks)
	case c.ElectionTicks <= c.HeartbeatTicks:
		return fmt.Errorf("%w: ElectionTicks %d must be greater than HeartbeatTicks %d",
			ErrInvalidConfig, c.ElectionTicks, c.HeartbeatTicks)
	case c.MaxAppendBytes == 0:
		return fmt.Errorf("%w: MaxAppendBytes must be positive", ErrInvalidConfig)
	case c.MaxInflightMsgs <= 0:
		return fmt.Errorf("%w: MaxInflightMsgs %d must be positive", ErrInvalidConfig, c.MaxInflightMsgs)
	case c.MaxInflightBytes != 0 && c.MaxInflightBytes < c.MaxAppendBytes:
		return fmt.Errorf("%w: MaxInflightBytes %d must be 0 or at least MaxAppendBytes %d",
			ErrInvalidConfig, c.MaxInflightBytes, c.MaxAppendBytes)
	}
	for i, p := range c.Peers {
		if p == 0 {
			return fmt.Errorf("%w: Peers[%d] is 0", ErrInvalidConfig, i)
		}
	}
	return nil
}

package raft

import "fmt"

// Role is a node's part in its current term.
type Role uint8

const (
	// Follower answers leaders and candidates (Figure 2, Followers).
	Follower Role = iota + 1
	// PreCandidate asks for pre-votes without raising its term
	// (dissertation §9.6).
	PreCandidate
	// Candidate has raised its term and asks for votes.
	Candidate
	// Leader replicates its log and decides commitment.
	Leader
)

// String returns the role's name.
func (r Role) String() string {
	switch r {
	case Follower:
		return "follower"
	case PreCandidate:
		return "pre-candidate"
	case Candidate:
		return "candidate"
	case Leader:
		return "leader"
	default:
		return fmt.Sprintf("Role(%d)", uint8(r))
	}
}

// SoftState is the volatile part of a node's state that the application may
// want to watch: who leads, and what this node is. It is not persisted.
type SoftState struct {
	Lead uint64 // 0 when unknown
	Role Role
}

// ReadState confirms a ReadIndex request (dissertation §6.4): once the
// application has applied through Index, a read issued when ReadIndex(ID)
// was called may be served from the local state machine and is
// linearizable.
type ReadState struct {
	ID    uint64
	Index uint64
}

// Ready is the work the core hands to its caller. The caller must handle it
// in this order, then call Advance:
//
//  1. Persist HardState (if not empty), Snapshot (if not empty) and Entries
//     to stable storage, durably if MustSync: write and sync before step 2.
//     Entries replace any stored entries at the same or later indexes.
//  2. Send Messages. A vote or an append acknowledgement in Messages
//     promises that step 1 happened; sending them first loses that promise
//     on a crash (Figure 2: "respond after updating stable storage"). A
//     leader's requests (appends, heartbeats, snapshots, TimeoutNow) may
//     be sent before step 1 if HardState keeps the term and vote already
//     persisted: they promise nothing about the leader's disk, and the
//     core counts the leader's own copy of Entries towards a quorum only
//     at Advance (dissertation §10.2.1).
//  3. Apply Snapshot (if not empty) and then CommittedEntries to the state
//     machine, in order. Serve ReadStates once applied through their index;
//     fail the reads of DroppedReads. Tell the callers of Forward what
//     became of their proposals (ForwardResults), before applying: a
//     proposal placed at an index this Ready commits waits for it.
//  4. Call Advance(rd): it confirms step 1, and only then does a leader
//     count its own copy of rd.Entries.
//
// The slices alias the core's memory: the caller must not modify them.
type Ready struct {
	// SoftState is non-nil when the leader or the role changed.
	SoftState *SoftState
	// HardState is the state to persist; empty if unchanged.
	HardState HardState
	// Entries are to be appended to stable storage.
	Entries []Entry
	// Snapshot, if not empty, is to be persisted and installed. A Ready
	// with a Snapshot has no CommittedEntries: the entries after it are
	// handed out in a later Ready.
	Snapshot Snapshot
	// CommittedEntries are to be applied to the state machine.
	CommittedEntries []Entry
	// ConfChanges are the membership changes among CommittedEntries that
	// took effect, in log order, each with the membership it produced, as
	// the core worked it out when the entry was appended (§4.1). An
	// EntryConfChange that does not decode or does not apply to the
	// membership before it is a no-op on every node alike, and has none.
	// The application records these; it never works them out again.
	ConfChanges []CommittedConfChange
	// Messages are to be sent after the persistence of step 1.
	Messages []Message
	// ReadStates are confirmed ReadIndex requests.
	ReadStates []ReadState
	// DroppedReads are the IDs of ReadIndex requests that will never be
	// confirmed: the node lost leadership, or (on a follower) its leader
	// changed, gave up on it, or refused. Their callers retry.
	DroppedReads []uint64
	// ForwardResults say what became of proposals made with Forward:
	// appended where, refused, or unanswered (ForwardResult).
	ForwardResults []ForwardResult
	// MustSync says whether step 1 must sync to disk before step 2 (the
	// term, vote, entries or snapshot changed; a commit index alone may be
	// written lazily).
	MustSync bool
}

// CommittedConfChange is a committed membership change: the entry it came
// in, the change, and the membership after it.
type CommittedConfChange struct {
	Index, Term uint64
	Change      ConfChange
	Conf        ConfState
}

// Status is a snapshot of a node's state for monitoring and tests.
type Status struct {
	ID uint64
	HardState
	SoftState
	Applied   uint64
	LastIndex uint64
	// Conf is the latest membership in the log (it takes effect when
	// appended, dissertation §4.1).
	Conf ConfState
	// LeadTransferee is the target of a leadership transfer in progress.
	LeadTransferee uint64
	// Progress is the leader's view of every member; nil on non-leaders.
	Progress map[uint64]Progress
	// LogLost, if not nil, says this node's storage lost log entries it
	// had acknowledged (see LogLost); the node neither votes nor applies
	// past it until a leader has given it those entries again.
	LogLost *LogLost
}

// LogLost describes a follower whose log ends below the commit index a
// leader told it. A leader tells a follower to commit only entries that
// follower acknowledged as durably stored (its Match), so a log that ends
// below that index lost synced entries: the disk dropped or damaged them
// (a torn or truncated tail past what was synced, a deleted segment). The
// node cannot count towards any majority that needs those entries, so it
// refuses every vote and pre-vote and does not campaign; it does not
// advance its commit index, so it applies nothing more. It recovers on its
// own only if a leader sends it the missing entries again (a new leader
// probes back to where its log ends); otherwise the operator replaces it
// (remove the member, add it back with a new ID and an empty directory).
type LogLost struct {
	// Leader and Term name the leader that revealed the loss.
	Leader, Term uint64
	// Commit is the commit index that leader sent; LastIndex is where this
	// node's log ends.
	Commit, LastIndex uint64
}

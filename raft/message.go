package raft

import "fmt"

// MessageType says what a Message is. Requests and their responses are
// named alike (MsgAppendRequest, MsgAppendResponse).
type MessageType uint8

// The message types. Numbers are part of the wire format of the transport:
// append only.
const (
	// MsgVoteRequest asks for a vote in an election (Figure 2,
	// RequestVote). LogIndex and LogTerm are the candidate's last entry.
	MsgVoteRequest MessageType = iota + 1
	// MsgVoteResponse grants (Reject false) or refuses a vote.
	MsgVoteResponse
	// MsgPreVoteRequest asks whether the recipient would vote for the
	// sender at Term, without anyone changing term (dissertation §9.6).
	MsgPreVoteRequest
	// MsgPreVoteResponse answers a MsgPreVoteRequest.
	MsgPreVoteResponse
	// MsgAppendRequest carries entries after (LogIndex, LogTerm) and the
	// leader's Commit (Figure 2, AppendEntries).
	MsgAppendRequest
	// MsgAppendResponse acknowledges entries up to LogIndex, or rejects
	// the request whose LogIndex it echoes, with HintIndex and HintTerm.
	MsgAppendResponse
	// MsgHeartbeatRequest asserts leadership and carries Commit (capped at
	// what the follower is known to have) and a ReadRound.
	MsgHeartbeatRequest
	// MsgHeartbeatResponse answers a heartbeat, echoing ReadRound.
	MsgHeartbeatResponse
	// MsgSnapshotRequest carries a Snapshot (Figure 13, InstallSnapshot).
	MsgSnapshotRequest
	// MsgSnapshotResponse says how far the follower's log now matches the
	// leader's: to LogIndex, its last index once the snapshot is installed,
	// or its commit index if its log already covered the snapshot and was
	// kept. It never rejects: either way the leader learns where to go on
	// from, and Step refuses one with Reject set.
	MsgSnapshotResponse
	// MsgTimeoutNow tells the target of a leadership transfer to start an
	// election at once (§3.10). It has no response.
	MsgTimeoutNow
	// MsgReadIndexRequest asks the leader for a read index on behalf of a
	// follower's reads (dissertation §6.4, as etcd's MsgReadIndex).
	// ReadRound numbers the request: it only grows on the follower, and
	// every other field past Term is zero.
	MsgReadIndexRequest
	// MsgReadIndexResponse answers a MsgReadIndexRequest, echoing its
	// ReadRound: LogIndex is the read index, confirmed by a quorum round
	// that started after the request arrived; or Reject (with LogIndex 0)
	// when the recipient does not lead the term: it is a follower or
	// candidate, the request is of an older term, or it led and was
	// deposed while it held the request. Every other field past Term is
	// zero.
	MsgReadIndexResponse
	// MsgProposalRequest carries proposals a follower forwards to its
	// leader (etcd's MsgProp): Entries holds one normal entry per
	// proposal, with Index and Term zero, which the leader appends as if
	// proposed locally (Core.Propose's checks). ReadRound numbers the
	// request, from the follower's counter of read index requests; every
	// other field past Term is zero (docs/raft.md, "Forwarded
	// proposals").
	MsgProposalRequest
	// MsgProposalResponse answers a MsgProposalRequest, echoing its
	// ReadRound: the leader appended its proposals from LogIndex on, in
	// LogTerm (its term); or Reject, with no index, and Lead the node the
	// refusing node takes for the leader (itself if it leads but takes no
	// proposals for now, the target of a transfer, 0 for none): they were
	// appended nowhere.
	MsgProposalResponse
)

var messageTypeNames = [...]string{
	MsgVoteRequest:       "VoteRequest",
	MsgVoteResponse:      "VoteResponse",
	MsgPreVoteRequest:    "PreVoteRequest",
	MsgPreVoteResponse:   "PreVoteResponse",
	MsgAppendRequest:     "AppendRequest",
	MsgAppendResponse:    "AppendResponse",
	MsgHeartbeatRequest:  "HeartbeatRequest",
	MsgHeartbeatResponse: "HeartbeatResponse",
	MsgSnapshotRequest:   "SnapshotRequest",
	MsgSnapshotResponse:  "SnapshotResponse",
	MsgTimeoutNow:        "TimeoutNow",
	MsgReadIndexRequest:  "ReadIndexRequest",
	MsgReadIndexResponse: "ReadIndexResponse",
	MsgProposalRequest:   "ProposalRequest",
	MsgProposalResponse:  "ProposalResponse",
}

// String returns the type's name without the Msg prefix.
func (t MessageType) String() string {
	if t.Valid() {
		return messageTypeNames[t]
	}
	return fmt.Sprintf("MessageType(%d)", uint8(t))
}

// Valid reports whether t is a known message type.
func (t MessageType) Valid() bool { return t >= MsgVoteRequest && t <= MsgProposalResponse }

// IsResponse reports whether t answers a request.
func (t MessageType) IsResponse() bool {
	switch t {
	case MsgVoteResponse, MsgPreVoteResponse, MsgAppendResponse, MsgHeartbeatResponse, MsgSnapshotResponse,
		MsgReadIndexResponse, MsgProposalResponse:
		return true
	}
	return false
}

// Message is what one node sends another. It is a plain struct of integers,
// booleans, entries and a snapshot, so that a transport can encode it with a
// simple binary codec; fields a type does not use are zero.
type Message struct {
	Type MessageType
	From uint64
	To   uint64
	// Term is the sender's current term, except in pre-vote requests and
	// granted pre-vote responses, where it is the term the candidate would
	// campaign in.
	Term uint64

	// LogIndex and LogTerm name a log position. AppendRequest: the entry
	// preceding Entries (prevLogIndex, prevLogTerm). VoteRequest and
	// PreVoteRequest: the candidate's last entry (lastLogIndex,
	// lastLogTerm). AppendResponse: on success the highest index known to
	// match the leader, on reject the rejected request's LogIndex.
	// SnapshotResponse: the follower's last index after installing.
	// ReadIndexResponse: the read index.
	LogIndex uint64
	LogTerm  uint64

	// Entries are the log entries of an AppendRequest, or the proposals
	// of a ProposalRequest (Index and Term zero).
	Entries []Entry
	// Commit is the leader's commit index (AppendRequest) or the part of it
	// the follower is known to hold (HeartbeatRequest).
	Commit uint64

	// Reject is true when a response refuses: a vote or pre-vote not
	// granted, an append that failed the consistency check. A snapshot
	// response never rejects.
	Reject bool
	// HintIndex and HintTerm help a leader skip back over a conflicting
	// run of entries in one round trip: the follower's last index at or
	// below the rejected LogIndex whose term is at most the rejected
	// LogTerm, and that term.
	HintIndex uint64
	HintTerm  uint64

	// Snapshot is the payload of a SnapshotRequest.
	Snapshot Snapshot

	// ReadRound ties heartbeats to ReadIndex requests (dissertation §6.4):
	// a leader confirms a read once a quorum has answered a heartbeat of
	// that round or later. Responses echo it. In a ReadIndexRequest it is
	// the follower's own request number, which the response echoes.
	ReadRound uint64
	// Transfer marks a VoteRequest sent because of a leadership transfer;
	// voters grant it even while they hear from a leader (§3.10).
	Transfer bool
	// Lead, in a refusing ProposalResponse, is the node the sender takes
	// for the leader (0: none); zero in every other message.
	Lead uint64
}

// String formats the message compactly for logs and transcripts.
func (m Message) String() string {
	s := fmt.Sprintf("%d->%d %s term=%d", m.From, m.To, m.Type, m.Term)
	switch m.Type {
	case MsgVoteRequest, MsgPreVoteRequest:
		s += fmt.Sprintf(" last=%d/%d", m.LogIndex, m.LogTerm)
		if m.Transfer {
			s += " transfer"
		}
	case MsgAppendRequest:
		s += fmt.Sprintf(" prev=%d/%d commit=%d entries=%d", m.LogIndex, m.LogTerm, m.Commit, len(m.Entries))
		if n := len(m.Entries); n > 0 {
			s += fmt.Sprintf("[%d..%d]", m.Entries[0].Index, m.Entries[n-1].Index)
		}
	case MsgAppendResponse:
		s += fmt.Sprintf(" index=%d", m.LogIndex)
		if m.Reject {
			s += fmt.Sprintf(" hint=%d/%d", m.HintIndex, m.HintTerm)
		}
	case MsgHeartbeatRequest:
		s += fmt.Sprintf(" commit=%d", m.Commit)
	case MsgSnapshotRequest:
		s += fmt.Sprintf(" snapshot=%d/%d", m.Snapshot.Metadata.Index, m.Snapshot.Metadata.Term)
	case MsgSnapshotResponse:
		s += fmt.Sprintf(" index=%d", m.LogIndex)
	case MsgReadIndexResponse:
		if !m.Reject {
			s += fmt.Sprintf(" index=%d", m.LogIndex)
		}
	case MsgProposalRequest:
		s += fmt.Sprintf(" proposals=%d", len(m.Entries))
	case MsgProposalResponse:
		if m.Reject {
			s += fmt.Sprintf(" lead=%d", m.Lead)
		} else {
			s += fmt.Sprintf(" at=%d/%d", m.LogIndex, m.LogTerm)
		}
	}
	if m.ReadRound != 0 {
		s += fmt.Sprintf(" read=%d", m.ReadRound)
	}
	if m.Reject {
		s += " reject"
	}
	return s
}

package raft

import "slices"

// ReportPeerGone tells the core that peer id closed its connection to this
// node from its own end: an EOF or a reset from id, not a timeout and not
// an error of this end. On a host that lives, the kernel closes a process's
// connections when the process dies, so when id is the leader this node
// follows, the close is a hint that the leader's process is gone, and the
// node acts on it at once instead of waiting out its election timeout:
//
//   - it stops counting id as a live leader: Lead becomes 0, so that it
//     answers pre-votes and votes again, the pre-vote requests it ignored
//     since it last heard from id included (check-quorum's rule,
//     dissertation §4.2.3, made them wait);
//   - with PreVote, the voters campaign in turn, by ID with the gone leader
//     left out: the first at once (unless it has just granted another
//     node's pre-vote: then it waits for its election timeout, as that
//     node campaigns); the one at place k (from 0) after k+1 ticks if it
//     has heard from no leader by then, so at least k whole ticks later
//     (the next tick may be a moment away). Taking turns keeps the
//     followers, which all see the close within a moment, from splitting
//     the vote. Without PreVote the hint only forgets the leader: a
//     campaign would raise the term, and a false hint would then depose a
//     live leader.
//
// A hint is taken once per leader and term, and only by a follower of id;
// any other is ignored. A follower whose campaign fails waits for its
// election timeout as usual.
//
// It is only a hint, never proof: a connection also closes when a proxy
// resets it, or when the peer gives up on a write. That is safe because an
// election still needs a majority, and every voter that hears from a live
// leader ignores the campaign (check-quorum): a false hint costs a round of
// messages, not leadership. docs/raft.md ("Where coord differs") has the
// argument.
func (r *Core) ReportPeerGone(id uint64) {
	if r.role != Follower || id == 0 || id == r.id || r.lead != id {
		return
	}
	if r.hintLead == id && r.hintTerm == r.term {
		return // this leader was reported gone in this term already
	}
	r.hintLead, r.hintTerm = id, r.term
	r.lead = 0
	granted := false
	for _, m := range r.ignoredPreVotes {
		if m.Term > r.term && r.handleVoteRequest(m) {
			granted = true
		}
	}
	r.ignoredPreVotes = nil
	rank := r.campaignRank(id)
	if !r.cfg.PreVote || rank < 0 || !r.promotable() {
		return
	}
	switch {
	case rank == 0 && !granted:
		r.electionElapsed = 0
		r.hup(false)
	case rank > 0:
		// Campaign after rank+1 ticks, unless a leader speaks first.
		r.electionElapsed = max(r.electionElapsed, r.randomizedElectionTimeout-(rank+1))
	}
}

// campaignRank returns this node's place among the voters other than
// gone, by ID, or -1 if it is not one of them.
func (r *Core) campaignRank(gone uint64) int {
	rank := 0
	for _, id := range r.voters.IDs() {
		switch id {
		case gone:
			continue
		case r.id:
			return rank
		}
		rank++
	}
	return -1
}

// keepIgnoredPreVote remembers a pre-vote request that a follower ignored
// because it hears from its leader, for ReportPeerGone to answer: the
// latest per sender, and never more than one per member.
func (r *Core) keepIgnoredPreVote(m Message) {
	if i := slices.IndexFunc(r.ignoredPreVotes, func(o Message) bool { return o.From == m.From }); i >= 0 {
		r.ignoredPreVotes[i] = m
		return
	}
	if len(r.ignoredPreVotes) < len(r.members) {
		r.ignoredPreVotes = append(r.ignoredPreVotes, m)
	}
}

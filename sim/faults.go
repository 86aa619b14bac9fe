package sim

import (
	"time"

	shell "coord/node"
	"coord/raft"
	"coord/storage/vfs"
)

func (s *Sim) injectFault() {
	var choices []Fault
	for _, f := range []Fault{FaultPartition, FaultCrash, FaultMembership, FaultKill, FaultCut} {
		if s.cfg.Faults.Has(f) {
			choices = append(choices, f)
		}
	}
	for _, f := range []Fault{FaultDiskFull, FaultLostDir} {
		if s.cfg.Disk && s.cfg.Faults.Has(f) {
			choices = append(choices, f)
		}
	}
	if len(choices) == 0 {
		return
	}
	s.lastFault = s.now
	switch choices[s.rng.IntN(len(choices))] {
	case FaultPartition:
		s.partition()
	case FaultCrash:
		s.crashSome(false)
	case FaultKill:
		s.crashSome(true)
	case FaultCut:
		s.cutConnection()
	case FaultDiskFull:
		s.fillDisk()
	case FaultLostDir:
		s.loseDir()
	case FaultMembership:
		if s.rng.IntN(3) == 0 {
			s.transferLeadership()
		} else {
			s.changeMembership()
		}
	}
}

// transferLeadership asks the leader to hand over to a random voter
// (§3.10); a transfer is membership's companion in operations.
func (s *Sim) transferLeadership() {
	l := s.leader()
	if l == nil {
		return
	}
	voters := l.h.Core().Status().Conf.Voters
	to := voters[s.rng.IntN(len(voters))]
	if to == l.id || l.h.Core().TransferLeadership(to) != nil {
		return
	}
	s.stats.Transfers++
	s.tracef("node %d transfers leadership to %d", l.id, to)
	s.process(l)
}

func (s *Sim) activeIDs() []uint64 {
	var ids []uint64
	for _, id := range s.ids {
		if !s.nodes[id].retired {
			ids = append(ids, id)
		}
	}
	return ids
}

func (s *Sim) partition() {
	ids := s.activeIDs()
	if len(ids) < 2 {
		return
	}
	s.stats.Partitions++
	if s.rng.IntN(2) == 0 {
		// Symmetric: a random minority (or, sometimes, half) is cut off.
		s.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		k := 1 + s.rng.IntN(len(ids)/2)
		group := ids[:k]
		for _, a := range group {
			for _, b := range ids[k:] {
				s.cut[[2]uint64{a, b}] = true
				s.cut[[2]uint64{b, a}] = true
			}
		}
		s.tracef("partition %v from the rest", group)
	} else {
		// One-way: a few links drop in one direction only.
		for range 1 + s.rng.IntN(3) {
			a, b := ids[s.rng.IntN(len(ids))], ids[s.rng.IntN(len(ids))]
			if a != b {
				s.cut[[2]uint64{a, b}] = true
				s.tracef("cut %d->%d", a, b)
			}
		}
	}
	s.schedule(&event{at: s.now + s.us(100*time.Millisecond) + s.rng.Int64N(s.us(time.Second)), kind: eventHeal})
}

// crashSome crashes a node, the leader half the time, and restarts it
// later. With kill, only its process dies: its peers see its connections
// close (the hint). Its storage is treated as after a machine crash
// either way, the stricter case: a killed process's unsynced writes would
// survive in the page cache.
func (s *Sim) crashSome(kill bool) {
	down := 0
	for _, id := range s.activeIDs() {
		if s.nodes[id].h == nil {
			down++
		}
	}
	// Mostly keep a majority up, so that the cluster makes progress
	// between faults; sometimes take the majority down too.
	if 2*(down+1) >= len(s.activeIDs()) && s.rng.IntN(4) != 0 {
		return
	}
	victim := s.leader()
	if victim == nil || s.rng.IntN(2) != 0 {
		victim = s.randomLiveNode()
	}
	if victim == nil {
		return
	}
	switch {
	case kill:
		s.kill(victim)
	case victim.fs != nil && s.rng.IntN(2) == 0:
		s.stats.Crashes++
		// Crash in the middle of a coming write: the storage's next few
		// file operations are the last.
		victim.dying = true
		victim.fs.SetCrashPoint(1 + s.rng.IntN(6))
		s.schedule(&event{at: s.now + s.us(100*time.Millisecond), kind: eventCrash, node: victim.id, incarnation: victim.incarnation})
	default:
		s.stats.Crashes++
		s.crash(victim)
	}
	restartAt := s.now + s.us(50*time.Millisecond) + s.rng.Int64N(s.us(1500*time.Millisecond))
	s.schedule(&event{at: restartAt, kind: eventRestart, node: victim.id, incarnation: victim.incarnation})
}

// kill kills a node's process: it stops as in a crash, and each peer sees
// its connection to it close a network delay later.
func (s *Sim) kill(n *node) {
	s.stats.Kills++
	s.tracef("kill node %d's process", n.id)
	s.crash(n)
	for _, id := range s.activeIDs() {
		if id != n.id {
			s.closeConnection(id, n.id)
		}
	}
}

// cutConnection resets the connection between two live nodes, one of them
// the leader half the time: what was in flight on it is lost, and each end
// sees it close, a false hint that the other died.
func (s *Sim) cutConnection() {
	a := s.leader()
	if a == nil || s.rng.IntN(2) != 0 {
		a = s.randomLiveNode()
	}
	b := s.randomLiveNode()
	if a == nil || b == nil || a == b {
		return
	}
	s.stats.Cuts++
	s.links[pair(a.id, b.id)]++
	s.tracef("reset the connection between %d and %d", a.id, b.id)
	s.closeConnection(a.id, b.id)
	s.closeConnection(b.id, a.id)
}

// fillDisk fills a node's disk for a while: its writes fail with ENOSPC
// (a seeded part of each written first), and it holds its Ready until a
// retry after the space returns succeeds.
func (s *Sim) fillDisk() {
	n := s.randomLiveNode()
	if n == nil || n.fault == nil {
		return
	}
	s.stats.DiskFulls++
	n.fault.SetInjector(vfs.NoSpace())
	s.tracef("node %d's disk is full", n.id)
	s.schedule(&event{at: s.now + s.us(50*time.Millisecond) + s.rng.Int64N(s.us(1500*time.Millisecond)), kind: eventSpace, node: n.id})
}

// loseDir deletes a node's log, snapshots and vote file, as an operator's
// mistake or a failed disk would, and crashes it: its restart must be
// refused (its IDENTITY remains), and it stays down. At most one node per
// run, and only where the others still form a majority.
func (s *Sim) loseDir() {
	l := s.leader()
	if l == nil || s.anyLost() {
		return
	}
	conf := l.h.Core().Status().Conf
	if conf.IsJoint() || len(conf.Voters) < 3 {
		return
	}
	n := s.nodes[conf.Voters[s.rng.IntN(len(conf.Voters))]]
	if n.fs == nil || n.dying {
		return
	}
	s.crash(n)
	if n.fs.Crashed() {
		return
	}
	n.fs.ReleaseLocks()
	for _, dir := range []string{diskDir + "/wal", diskDir + "/snap"} {
		names, _ := n.fs.List(dir)
		for _, name := range names {
			_ = n.fs.Remove(dir + "/" + name)
		}
		_ = n.fs.Remove(dir)
	}
	_ = n.fs.Remove(diskDir + "/VOTE")
	n.lost = true
	s.stats.LostDirs++
	s.tracef("node %d's data directory is lost (log, snapshots, vote)", n.id)
	s.schedule(&event{at: s.now + s.us(50*time.Millisecond), kind: eventRestart, node: n.id, incarnation: n.incarnation})
}

// anyLost reports whether a node that lost its directory is still a
// member (not yet removed).
func (s *Sim) anyLost() bool {
	for _, id := range s.ids {
		if n := s.nodes[id]; n.lost && !n.retired {
			return true
		}
	}
	return false
}

// membershipOptions lists the changes the leader may be asked for: add a
// learner, promote or remove one, replace a voter with one (joint), remove
// a voter.
func (s *Sim) membershipOptions(conf raft.ConfState) [][]raft.ConfChangeSingle {
	var options [][]raft.ConfChangeSingle
	minVoters, maxVoters := max(1, s.cfg.Nodes-1), s.cfg.Nodes+1
	if len(conf.Learners) == 0 && len(s.activeIDs()) < 2*s.cfg.Nodes+2 {
		options = append(options, []raft.ConfChangeSingle{{Type: raft.ConfChangeAddLearner, NodeID: s.nextID}})
	}
	for _, id := range conf.Learners {
		if len(conf.Voters) < maxVoters {
			options = append(options, []raft.ConfChangeSingle{{Type: raft.ConfChangeAddVoter, NodeID: id}})
		}
		options = append(options, []raft.ConfChangeSingle{{Type: raft.ConfChangeRemove, NodeID: id}})
		// Replace a voter with the learner in one change: two voters
		// change, so it goes through joint consensus (§4.3).
		out := conf.Voters[s.rng.IntN(len(conf.Voters))]
		replace := []raft.ConfChangeSingle{{Type: raft.ConfChangeAddVoter, NodeID: id}, {Type: raft.ConfChangeRemove, NodeID: out}}
		options = append(options, replace, replace) // twice: the rarer, subtler case
	}
	if len(conf.Voters) > minVoters {
		id := conf.Voters[s.rng.IntN(len(conf.Voters))]
		options = append(options, []raft.ConfChangeSingle{{Type: raft.ConfChangeRemove, NodeID: id}})
	}
	return options
}

// lostMember returns a member of conf that lost its directory.
func (s *Sim) lostMember(conf raft.ConfState) (uint64, bool) {
	for _, id := range s.ids {
		if s.nodes[id].lost && conf.IsMember(id) {
			return id, true
		}
	}
	return 0, false
}

// changeMembership asks the leader for one change: add a learner, promote
// a caught-up learner, remove a learner, or remove a voter (possibly the
// leader itself).
func (s *Sim) changeMembership() {
	l := s.leader()
	if l == nil {
		return
	}
	st := l.h.Core().Status()
	conf := st.Conf
	if conf.IsJoint() {
		return // the leader leaves it by itself
	}
	var options [][]raft.ConfChangeSingle
	if id, ok := s.lostMember(conf); ok {
		// The operator replaces a node that lost its directory: removing
		// it comes first, and nothing else changes until then (a smaller
		// cluster with a dead member could lose its majority).
		options = [][]raft.ConfChangeSingle{{{Type: raft.ConfChangeRemove, NodeID: id}}}
	} else {
		options = s.membershipOptions(conf)
	}
	if len(options) == 0 {
		return
	}
	changes := options[s.rng.IntN(len(options))]
	// Through the handler, as the server's operator does it: a leader
	// whose disk is full refuses it.
	if err := l.h.ProposeConfChange(raft.ConfChange{Changes: changes}, func(shell.Result) {}); err != nil {
		return // pending change, a learner not caught up, a full disk: try later
	}
	s.stats.ConfChanges++
	if len(changes) > 1 {
		s.stats.JointChanges++
	}
	s.tracef("node %d proposes %v", l.id, changes)
	change := changes[0]
	if change.Type == raft.ConfChangeAddLearner && change.NodeID == s.nextID {
		s.nextID++
		s.boot(s.addNode(change.NodeID), nil)
	}
	s.process(l)
}

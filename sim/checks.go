package sim

import (
	"fmt"
	"maps"
	"slices"
)

// endChaos stops the faults: links heal, crashed members restart, and the
// liveness clock starts.
func (s *Sim) endChaos() {
	s.chaos = false
	clear(s.cut)
	s.healedAt = max(s.now, 1)
	s.lastFault = s.now
	s.tracef("faults stop")
	for _, id := range s.ids {
		n := s.nodes[id]
		if n.dying {
			n.fs.SetCrashPoint(0)
			n.dying = false
		}
		if !n.joined && !n.retired && s.leaderConfExcludes(id) {
			// A learner whose addition never committed: give up on it.
			n.retired = true
			s.crash(n)
		}
		if n.fault != nil {
			n.fault.SetInjector(nil) // space returns
		}
		if n.h == nil && !n.retired {
			s.boot(n, nil) // refused for a node that lost its directory
		}
	}
	s.schedule(&event{at: s.now + s.exp(s.cfg.WriteInterval), kind: eventClientWrite})
}

func (s *Sim) leaderConfExcludes(id uint64) bool {
	for _, other := range s.ids {
		if n := s.up(other); n != nil {
			if cs := n.h.Core().Status().Conf; cs.IsMember(id) {
				return false
			}
		}
	}
	return true
}

// checkLiveness fails the run if, after the faults stopped, no write
// committed within the bound, or the members did not all catch up.
func (s *Sim) checkLiveness() {
	if s.healedAt == 0 || s.failure != nil {
		return
	}
	deadline := s.healedAt + s.us(s.cfg.LivenessBound)
	if !s.livenessMet {
		if s.now > deadline {
			s.fail("liveness", "no write committed within %v after the faults stopped; %s", s.cfg.LivenessBound, s.describe())
		}
		return
	}
	if s.converged() {
		s.livenessDone = true
		return
	}
	if s.now > deadline+s.us(s.cfg.LivenessBound) {
		s.fail("liveness", "members did not catch up to acknowledged index %d within %v; %s", s.maxAcked, s.cfg.LivenessBound, s.describe())
	}
}

// converged reports whether every running member applied every
// acknowledged write.
func (s *Sim) converged() bool {
	l := s.leader()
	if l == nil {
		return false
	}
	conf := l.h.Core().Status().Conf
	for _, id := range append(append(slices.Clone(conf.Voters), conf.VotersOutgoing...), conf.Learners...) {
		n := s.nodes[id]
		if n == nil || n.retired || n.lost {
			continue
		}
		if n.h == nil || n.h.Applied() < s.maxAcked {
			return false
		}
	}
	return true
}

func (s *Sim) describe() string {
	out := ""
	for _, id := range s.ids {
		n := s.nodes[id]
		switch {
		case n.retired:
			out += fmt.Sprintf("[%d retired]", id)
		case n.lost:
			out += fmt.Sprintf("[%d lost its directory]", id)
		case n.h == nil:
			out += fmt.Sprintf("[%d down]", id)
		default:
			st := n.h.Core().Status()
			out += fmt.Sprintf("[%d %v term=%d lead=%d commit=%d applied=%d last=%d %v]",
				id, st.Role, st.Term, st.Lead, st.Commit, n.h.Applied(), st.LastIndex, st.Conf)
		}
	}
	return out
}

// finalChecks runs after the last step: every acknowledged write is in the
// agreed history, and every running member holds it.
func (s *Sim) finalChecks() {
	if !s.livenessDone && s.healedAt != 0 {
		s.fail("liveness", "the run ended before the cluster converged; %s", s.describe())
		return
	}
	for _, w := range s.acked {
		fact, ok := s.check.appliedAt[w.index]
		if !ok || fact.data != hashString(w.data) {
			s.fail("acknowledged write lost", "write %q acknowledged at index %d is not what the cluster applied there", w.data, w.index)
			return
		}
	}
	if len(s.denied) == 0 {
		return
	}
	denied := map[uint64]deniedWrite{}
	for _, w := range s.denied {
		denied[hashString(w.data)] = w
	}
	for _, index := range slices.Sorted(maps.Keys(s.check.appliedAt)) {
		if w, ok := denied[s.check.appliedAt[index].data]; ok {
			s.fail("denied write", "write %q was answered as never applied (%s), and the cluster applied it at %d", w.data, w.why, index)
			return
		}
	}
}

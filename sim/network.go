package sim

import "coord/raft"

// maxQueuedPerNode bounds the messages in flight to one node; past it the
// network drops, like a full switch buffer. It never blocks the sender.
const maxQueuedPerNode = 2048

func (s *Sim) send(m raft.Message) {
	s.check.sent(s, m)
	if s.queued[m.To] >= maxQueuedPerNode {
		s.stats.Dropped++
		return
	}
	copies := 1
	if s.chaos {
		if s.cfg.Faults.Has(FaultLoss) && s.rng.Float64() < 0.05 {
			s.stats.Dropped++
			return
		}
		if s.cfg.Faults.Has(FaultDuplicate) && s.rng.Float64() < 0.02 {
			copies = 2
		}
	}
	for range copies {
		delay := s.us(s.cfg.LatencyMin) + s.rng.Int64N(s.us(s.cfg.LatencyMax-s.cfg.LatencyMin)+1)
		if s.chaos && s.cfg.Faults.Has(FaultReorder) {
			delay += s.rng.Int64N(2 * s.us(s.cfg.Tick))
		}
		if s.chaos && s.cfg.Faults.Has(FaultDelay) && s.rng.Float64() < 0.02 {
			delay += s.rng.Int64N(20 * s.us(s.cfg.Tick))
		}
		s.queued[m.To]++
		s.stats.MaxQueuedToNode = max(s.stats.MaxQueuedToNode, s.queued[m.To])
		s.schedule(&event{at: s.now + delay, kind: eventDeliver, msg: m})
	}
}

func (s *Sim) deliver(m raft.Message) {
	s.queued[m.To]--
	to := s.up(m.To)
	if to == nil || s.cut[[2]uint64{m.From, m.To}] || to.h.Held() {
		// A node whose disk is full hears nothing, as node.Node.
		s.stats.Dropped++
		return
	}
	s.stats.Delivered++
	if err := to.h.Step(m); err != nil {
		s.fail("step", "node %d rejected %v: %v", to.id, m, err)
		return
	}
	s.process(to)
}

package sim

import "coord/raft"

// maxQueuedPerNode bounds the messages in flight to one node; past it the
// network drops, like a full switch buffer. It never blocks the sender.
const maxQueuedPerNode = 2048

func (s *Sim) send(m raft.Message) {
	s.check.sent(s, m)
	if m.Snapshot.Source != nil {
		// The TCP transport reads the snapshot's file as it sends it; the
		// simulated network reads it now, into the message: the file may
		// be gone by the time the message arrives, as it may be when a
		// real transport gets to it (a send that fails).
		data, err := readSnapshot(m.Snapshot)
		if err != nil {
			s.stats.Dropped++
			return
		}
		m.Snapshot.Data, m.Snapshot.Source = data, nil
	}
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
		s.schedule(&event{at: s.now + delay, kind: eventDeliver, msg: m, link: s.links[pair(m.From, m.To)]})
		key := [2]uint64{m.From, m.To}
		s.lastSent[key] = max(s.lastSent[key], s.now+delay)
	}
}

// pair names the connection between two nodes, lower ID first.
func pair(a, b uint64) [2]uint64 { return [2]uint64{min(a, b), max(a, b)} }

func (s *Sim) deliver(e *event) {
	m := e.msg
	s.queued[m.To]--
	to := s.up(m.To)
	if to == nil || s.cut[[2]uint64{m.From, m.To}] || to.h.Held() || e.link != s.links[pair(m.From, m.To)] {
		// A message in flight on a connection that was reset is lost.
		// A node whose disk is full hears nothing, as node.Node.
		s.stats.Dropped++
		return
	}
	s.stats.Delivered++
	if m.Type == raft.MsgReadIndexResponse && m.Reject {
		s.stats.ReadsRefused++
	}
	if err := to.h.Step(m); err != nil {
		s.fail("step", "node %d rejected %v: %v", to.id, m, err)
		return
	}
	s.process(to)
}

// closeConnection has node to see its connection to peer close, a network
// delay from now and after every message peer sent it on the connection
// (TCP delivers the close after the data), unless the link from peer is
// partitioned (a silent network carries no FIN either).
func (s *Sim) closeConnection(to, peer uint64) {
	n := s.up(to)
	if n == nil || s.cut[[2]uint64{peer, to}] {
		return
	}
	delay := s.us(s.cfg.LatencyMin) + s.rng.Int64N(s.us(s.cfg.LatencyMax-s.cfg.LatencyMin)+1)
	at := max(s.now+delay, s.lastSent[[2]uint64{peer, to}])
	s.schedule(&event{at: at, kind: eventPeerGone, node: to, peer: peer, incarnation: n.incarnation})
}

// peerGone hands a node the hint that peer closed their connection (the
// transport's PeerClosed in a server).
func (s *Sim) peerGone(e *event) {
	n := s.up(e.node)
	if n == nil || n.incarnation != e.incarnation || !s.cfg.Hints {
		return // restarted since: that connection was not its
	}
	s.stats.Hints++
	n.h.ReportPeerGone(e.peer)
	s.process(n)
}

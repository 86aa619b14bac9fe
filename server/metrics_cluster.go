package server

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coord/raft"
)

// clusterMetrics are the metrics of replication to each peer and of the
// leases of the replicated state (issue 18): what an operator watches to
// see a follower fall behind, or leases churn.
type clusterMetrics struct {
	// peerLag is, on the leader, how many entries of its log each
	// follower is known to lack (last index - match); empty elsewhere.
	peerLag *prometheus.GaugeVec
	// peerContact is the time since this node last had a message from
	// each peer.
	peerContact *prometheus.GaugeVec
	// peersMu guards peers, the labels of the peers last set, so that a
	// peer removed from the configuration loses its series.
	peersMu *sync.Mutex
	peers   map[string]bool

	// The leases of the replicated state, counted as this node applies
	// the log (so every node counts alike; a restart counts again from
	// its snapshot).
	leasesHeld    prometheus.Gauge
	leasesGranted prometheus.Counter
	leasesExpired prometheus.Counter
	leasesRevoked prometheus.Counter
}

func newClusterMetrics() clusterMetrics {
	return clusterMetrics{
		peersMu: new(sync.Mutex),
		peers:   map[string]bool{},
		peerLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coord_raft_peer_replication_lag_entries",
			Help: "On the leader: entries of its log each follower is not yet known to hold (last index - match index)."}, []string{"peer"}),
		peerContact: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coord_raft_peer_last_contact_seconds",
			Help: "Seconds since this node last received a message from each peer."}, []string{"peer"}),
		leasesHeld: prometheus.NewGauge(prometheus.GaugeOpts{Name: "coord_lease_held",
			Help: "Leases held in the replicated state, as this node has applied it."}),
		leasesGranted: prometheus.NewCounter(prometheus.CounterOpts{Name: "coord_lease_granted_total",
			Help: "Acquires that made a free lease held, as this node applied them."}),
		leasesExpired: prometheus.NewCounter(prometheus.CounterOpts{Name: "coord_lease_expired_total",
			Help: "Leases freed because their holder did not renew in time (the leader's Expire), as this node applied them."}),
		leasesRevoked: prometheus.NewCounter(prometheus.CounterOpts{Name: "coord_lease_revoked_total",
			Help: "Leases freed by their holder's release, as this node applied them."}),
	}
}

func (c clusterMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.peerLag, c.peerContact, c.leasesHeld, c.leasesGranted, c.leasesExpired, c.leasesRevoked}
}

// setPeers records the replication lag (on the leader) and the time since
// the last contact of every peer of st's configuration.
// A series is set in place rather than reset and set again, so that a
// scrape never sees a peer missing.
func (m *Metrics) setPeers(st raft.Status, obs *observer, now time.Time) {
	m.peersMu.Lock()
	defer m.peersMu.Unlock()
	current := map[string]bool{}
	for _, ids := range [][]uint64{st.Conf.Voters, st.Conf.Learners} {
		for _, id := range ids {
			if id == st.ID {
				continue
			}
			label := strconv.FormatUint(id, 10)
			current[label] = true
			if pr, ok := st.Progress[id]; ok && st.Role == raft.Leader {
				m.peerLag.WithLabelValues(label).Set(float64(st.LastIndex - min(pr.Match, st.LastIndex)))
			} else {
				m.peerLag.DeleteLabelValues(label)
			}
			if last, ok := obs.lastContact(id); ok {
				m.peerContact.WithLabelValues(label).Set(max(now.Sub(last), 0).Seconds())
			}
		}
	}
	for label := range m.peers {
		if !current[label] {
			m.peerLag.DeleteLabelValues(label)
			m.peerContact.DeleteLabelValues(label)
		}
	}
	m.peers = current
}

// leaseChanged counts one lease transition an applied command made.
func (m *Metrics) leaseChanged(op Op, before, after Lease) {
	if m == nil {
		return
	}
	switch {
	case !before.Held() && after.Held():
		m.leasesGranted.Inc()
		m.leasesHeld.Inc()
	case before.Held() && !after.Held():
		m.leasesHeld.Dec()
		if op == OpExpire {
			m.leasesExpired.Inc()
		} else {
			m.leasesRevoked.Inc()
		}
	}
}

// setLeasesHeld sets the held leases after a snapshot was restored.
func (m *Metrics) setLeasesHeld(n int) {
	if m != nil {
		m.leasesHeld.Set(float64(n))
	}
}

package server

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"coord/api"
	"coord/raft"
)

// Metrics are one node's Prometheus metrics, in a registry of their own so
// that several nodes can live in one process (tests, the lab).
//
// Metrics is safe for concurrent use.
type Metrics struct {
	registry *prometheus.Registry

	term           prometheus.Gauge
	role           *prometheus.GaugeVec
	commitIndex    prometheus.Gauge
	appliedIndex   prometheus.Gauge
	leaderChanges  prometheus.Counter
	appendSeconds  prometheus.Histogram
	proposeSeconds prometheus.Histogram
	requests       *prometheus.CounterVec
	requestSeconds *prometheus.HistogramVec
	dropped        *prometheus.CounterVec
	invalid        *prometheus.CounterVec

	// The HTTP limits (HTTPLimits): what is open, and what was refused.
	watches             prometheus.Gauge
	watchesRejected     prometheus.Counter
	connections         prometheus.Gauge
	connectionsRejected prometheus.Counter
	// connectionsAccepted counts every connection accepted, the refused
	// included: its rate is the rate at which clients dial, which each
	// cost an accept and, over TLS, a handshake.
	connectionsAccepted prometheus.Counter
	// wireConnections counts the connections that spoke coord-wire/1.
	wireConnections prometheus.Counter

	// Replication to each peer and the leases (metrics_cluster.go).
	clusterMetrics
	// sessions counts lease sessions (session.go).
	sessions sessionMetrics

	// leaseRenewalsLocal counts renewals the leader answered without a
	// Raft write (Node.renewOnLeader).
	leaseRenewalsLocal prometheus.Counter

	// linearizableReads counts linearizable reads by where they were
	// served: "local" (a ReadIndex barrier on this node, leader or
	// follower) or "forwarded" (to the leader, when this node could not
	// get a read index).
	linearizableReads *prometheus.CounterVec
}

// NewMetrics returns a fresh set of metrics, with the Go runtime's and the
// process's collectors registered beside them.
func NewMetrics() *Metrics {
	latency := prometheus.ExponentialBuckets(0.0001, 2, 18) // 100µs to 13s
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		term:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "coord_raft_term", Help: "Current Raft term."}),
		role: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coord_raft_role",
			Help: "1 for the node's current role, 0 for the others."}, []string{"role"}),
		commitIndex:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "coord_raft_commit_index", Help: "Highest log index known committed."}),
		appliedIndex: prometheus.NewGauge(prometheus.GaugeOpts{Name: "coord_raft_applied_index", Help: "Highest log index applied to the state machine."}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "coord_raft_leader_changes_total",
			Help: "Times this node saw the leader change (including to no leader)."}),
		appendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "coord_raft_append_seconds",
			Help: "Time to make one Ready durable: entries and hard state written and fsynced.", Buckets: latency}),
		proposeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "coord_server_propose_seconds",
			Help: "Time from proposing a command on the leader to applying it.", Buckets: latency}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coord_http_requests_total",
			Help: "HTTP API requests by route and status code."}, []string{"route", "code"}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coord_http_request_seconds",
			Help: "HTTP API request latency by route.", Buckets: latency}, []string{"route"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coord_transport_dropped_total",
			Help: "Messages the transport dropped rather than block, by reason."}, []string{"reason"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coord_raft_invalid_messages_total",
			Help: "Peer messages the Raft core refused as ones no correct peer sends (a duplicate node ID, say), by type."}, []string{"type"}),
		watches: prometheus.NewGauge(prometheus.GaugeOpts{Name: "coord_http_watches",
			Help: "Watches (long polls and streams) being served."}),
		watchesRejected: prometheus.NewCounter(prometheus.CounterOpts{Name: "coord_http_watches_rejected_total",
			Help: "Watches answered 503 because the node served its maximum."}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Name: "coord_http_connections",
			Help: "Open connections to the HTTP API."}),
		connectionsRejected: prometheus.NewCounter(prometheus.CounterOpts{Name: "coord_http_connections_rejected_total",
			Help: "Connections closed when accepted because the node had its maximum open."}),
		connectionsAccepted: prometheus.NewCounter(prometheus.CounterOpts{Name: "coord_http_connections_total",
			Help: "Connections accepted by the HTTP API since the start (refused ones included): its rate is how often clients dial."}),
		wireConnections: prometheus.NewCounter(prometheus.CounterOpts{Name: "coord_http_wire_connections_total",
			Help: "Connections accepted by the HTTP API that spoke coord's multiplexed connection (coord-wire/1) since the start."}),
		clusterMetrics: newClusterMetrics(),
		sessions:       newSessionMetrics(),

		leaseRenewalsLocal: prometheus.NewCounter(prometheus.CounterOpts{Name: "coord_lease_renewals_local_total",
			Help: "Lease renewals the leader answered without a Raft write (after a quorum confirmed its leadership)."}),
		linearizableReads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coord_server_linearizable_reads_total",
			Help: "Linearizable reads by where they were served: local (after a ReadIndex round, on the leader or a follower) or forwarded (to the leader)."},
			[]string{"served"}),
	}
	m.registry.MustRegister(m.sessions.collectors()...)
	m.registry.MustRegister(m.term, m.role, m.commitIndex, m.appliedIndex, m.leaderChanges,
		m.appendSeconds, m.proposeSeconds, m.requests, m.requestSeconds, m.dropped, m.invalid,
		m.watches, m.watchesRejected, m.connections, m.connectionsRejected, m.connectionsAccepted, m.leaseRenewalsLocal,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.registry.MustRegister(m.clusterMetrics.collectors()...)
	m.registry.MustRegister(m.linearizableReads)
	m.registry.MustRegister(m.wireConnections)
	return m
}

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// routeObserver returns what counts one route's requests (by route and
// status code, and their latency), with the route's latency histogram and
// its count of 200 answers each looked up once, when first used (a route
// never asked shows no series), rather than by label on every request. A
// nil Metrics counts nothing.
func (m *Metrics) routeObserver(route string) func(code int, d time.Duration) {
	if m == nil {
		return func(int, time.Duration) {}
	}
	ok := sync.OnceValue(func() prometheus.Counter { return m.requests.WithLabelValues(route, "200") })
	seconds := sync.OnceValue(func() prometheus.Observer { return m.requestSeconds.WithLabelValues(route) })
	return func(code int, d time.Duration) {
		if code == http.StatusOK {
			ok().Inc()
		} else {
			m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		}
		seconds().Observe(d.Seconds())
	}
}

// setState records the node's term, role and indexes.
func (m *Metrics) setState(st api.NodeStatus) {
	m.term.Set(float64(st.Term))
	for _, r := range []api.Role{api.RoleLeader, api.RoleFollower, api.RoleCandidate, api.RoleLearner} {
		v := 0.0
		if r == st.Role {
			v = 1
		}
		m.role.WithLabelValues(string(r)).Set(v)
	}
	m.commitIndex.Set(float64(st.Commit))
	m.appliedIndex.Set(float64(st.Applied))
}

// Dropped counts one message the transport dropped, for the reason given.
func (m *Metrics) Dropped(reason string) { m.dropped.WithLabelValues(reason).Inc() }

// InvalidMessage counts one peer message the Raft core refused
// (raft.ErrInvalidMessage), by its type.
func (m *Metrics) InvalidMessage(msg raft.Message, _ error) {
	m.invalid.WithLabelValues(msg.Type.String()).Inc()
}

// The HTTP limits' metrics; each does nothing on a nil Metrics, as an API
// may have none.

// addWatches moves the gauge of watches by delta (+1, -1). The gauge is
// moved, not set to the count the caller read: two callers that read the
// count in one order may reach the gauge in the other, and a Set would
// leave the earlier count behind (a burst of 200 watches once read 181).
func (m *Metrics) addWatches(delta int64) {
	if m != nil {
		m.watches.Add(float64(delta))
	}
}

func (m *Metrics) watchRejected() {
	if m != nil {
		m.watchesRejected.Inc()
	}
}

// addConnections moves the gauge of open connections by delta, as
// addWatches does.
func (m *Metrics) addConnections(delta int64) {
	if m != nil {
		m.connections.Add(float64(delta))
	}
}

func (m *Metrics) connectionAccepted() {
	if m != nil {
		m.connectionsAccepted.Inc()
	}
}

func (m *Metrics) wireConnection() {
	if m != nil {
		m.wireConnections.Inc()
	}
}

func (m *Metrics) connectionRejected() {
	if m != nil {
		m.connectionsRejected.Inc()
	}
}

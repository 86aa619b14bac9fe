package api

// The dashboard: GET /v1/dashboard is the cluster as the answering node
// sees it (Dashboard); with stream=true, a stream of server-sent events
// (EventDashboard), one such document per event. The page at /ui/ draws
// it; docs/ui.md describes it.

// EventDashboard is the event type of a dashboard stream.
const EventDashboard = "dashboard"

// Dashboard is the JSON of GET /v1/dashboard.
type Dashboard struct {
	// Node is the id of the node that answered, HTTP its API address.
	Node uint64 `json:"node"`
	HTTP string `json:"http"`
	// Scheme is how to reach the members' HTTP addresses: "https", or
	// "http" on an insecure cluster.
	Scheme    string `json:"scheme"`
	ClusterID string `json:"cluster_id,omitempty"`
	// TimeUnixMs is when it answered, in milliseconds since 1970.
	TimeUnixMs int64 `json:"time_unix_ms"`
	// Leader and Term are the answering node's.
	Leader uint64 `json:"leader"`
	Term   uint64 `json:"term"`
	// Nodes are the members, by id, each as it answered the answering
	// node's status request (or why it did not).
	Nodes []DashboardNode `json:"nodes"`
	// Elections are the leader changes the answering node saw, newest
	// first.
	Elections []Election `json:"elections"`
	// Leases are the first 200 held leases by name; LeasesHeld counts
	// them all.
	Leases     []DashboardLease `json:"leases"`
	LeasesHeld int              `json:"leases_held"`
	// WritesPerSecond are the commands the answering node applied in each
	// of the last seconds, oldest first.
	WritesPerSecond []uint64 `json:"writes_per_second"`
}

// DashboardNode is one member in a Dashboard.
type DashboardNode struct {
	ID    uint64 `json:"id"`
	Peer  string `json:"peer"`
	HTTP  string `json:"http,omitempty"`
	Voter bool   `json:"voter"`
	// Reachable says whether it answered its status request; Error says
	// why not.
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// Role, Term, Leader, Commit and Applied are as the node reported
	// them.
	Role    Role   `json:"role,omitempty"`
	Term    uint64 `json:"term,omitempty"`
	Leader  uint64 `json:"leader,omitempty"`
	Commit  uint64 `json:"commit,omitempty"`
	Applied uint64 `json:"applied,omitempty"`
	// LagEntries is how far behind it is: when the leader answers, its
	// last index minus the node's match index; elsewhere the leader's
	// commit index minus the node's applied index, both as polled.
	LagEntries *uint64 `json:"lag_entries,omitempty"`
	// LastContactMs is the time since the answering node last received
	// a Raft message from it; absent for the answering node itself.
	LastContactMs *int64 `json:"last_contact_ms,omitempty"`
}

// DashboardLease is one held lease in a Dashboard.
type DashboardLease struct {
	Name   string `json:"name"`
	Holder string `json:"holder"`
	Token  uint64 `json:"token"`
	TTLMs  int64  `json:"ttl_ms"`
	// RemainingMs is the time left by the leader's clock, which decides
	// expiry; absent when a follower answers (the leader answers renewals
	// without a Raft write, so a follower does not know the deadline).
	RemainingMs *int64 `json:"remaining_ms,omitempty"`
	Revision    uint64 `json:"revision"`
}

// Election is one change of leader as a node saw it.
type Election struct {
	// Term is the term the leader was elected in; Leader the node elected.
	Term   uint64 `json:"term"`
	Leader uint64 `json:"leader"`
	// StartTerm is the term when this node saw the election begin: below
	// Term when it took more than one round (split votes), or when the
	// node learned of it late.
	StartTerm uint64 `json:"start_term"`
	// Previous is the leader before it, 0 if none was known.
	Previous uint64 `json:"previous"`
	// StartedUnixMs (milliseconds since 1970) is when this node first saw
	// the election: its own election
	// timeout, another node's vote request, or the leader disappearing.
	// ElectedUnixMs is when it learned the new leader.
	StartedUnixMs int64 `json:"started_unix_ms"`
	ElectedUnixMs int64 `json:"elected_unix_ms"`
	// TookMs is ElectedUnixMs - StartedUnixMs. SilenceMs, when the previous leader
	// was known, is the time from the last message this node had from it
	// to ElectedUnixMs: how long this node was without a working leader.
	TookMs    int64  `json:"took_ms"`
	SilenceMs *int64 `json:"silence_ms,omitempty"`
	// Reason says why the election started, as far as this node can tell.
	Reason string `json:"reason"`
}

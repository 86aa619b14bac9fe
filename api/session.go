package api

// A lease session (GET /v1/leases/{name}/session) is a stream of
// server-sent events that a lease's holder keeps open to the leader. The
// leader frees the lease, a grace period after the stream closes from the
// holder's side, if the token is still current; the holder treats the
// stream's loss as the loss of its lease. docs/API.md has the protocol.
const (
	// ParamToken and ParamHolder name the tenure a session is about.
	ParamToken  = "token"
	ParamHolder = "holder"

	// EventSession opens a session stream; its data is a SessionOpened.
	EventSession = "session"
	// EventKeepAlive is sent every SessionOpened.KeepAliveMs while the
	// session lasts; its data is "{}".
	EventKeepAlive = "keep-alive"
	// EventEnd is the last event of a stream the leader ended; its data is
	// a SessionEnded.
	EventEnd = "end"
)

// SessionOpened is the data of the first event of a session stream.
type SessionOpened struct {
	Name  string `json:"name"`
	Token uint64 `json:"token"`
	// KeepAliveMs is how often the leader sends a keep-alive event.
	KeepAliveMs int64 `json:"keep_alive_ms"`
	// GraceMs is how long after the stream closes from the holder's side
	// the leader waits before it frees the lease. A holder must stop
	// acting as the holder well within it of losing the stream.
	GraceMs int64 `json:"grace_ms"`
}

// Reasons a leader ends a session stream (SessionEnded.Reason).
const (
	// EndLost: the token is no longer the lease's current one (released,
	// expired, or taken over). The holder has lost the lease.
	EndLost = "lost"
	// EndNotLeader: the node stopped leading. It will not free the lease
	// for this stream's end; the holder may open a session on the new
	// leader.
	EndNotLeader = "not_leader"
)

// SessionEnded is the data of the last event of a session stream the
// leader ended.
type SessionEnded struct {
	Reason string `json:"reason"`
}

package api

// Headers of the API.
const (
	// HeaderForwarded marks a request one node forwarded to the leader,
	// naming the forwarding node; a node never forwards such a request
	// again, so a stale view of who leads cannot make requests loop.
	HeaderForwarded = "Coord-Forwarded-By"
	// HeaderNode names the node that answered (for a forwarded request,
	// the node that received it).
	HeaderNode = "Coord-Node"
	// HeaderLeader names the leader as the answering node knows it; a
	// client that sees it differ from HeaderNode knows its request was
	// forwarded.
	HeaderLeader = "Coord-Leader"
	// HeaderAuthorization carries the bearer token: BearerPrefix and the
	// token.
	HeaderAuthorization = "Authorization"
	// HeaderAuthenticate is set on 401 answers (BearerChallenge).
	HeaderAuthenticate = "WWW-Authenticate"
	// HeaderRetryAfter is set, in seconds, on the 503 and 507 answers
	// that another node, or this one a moment later, may not give.
	HeaderRetryAfter = "Retry-After"
)

// BearerPrefix opens the Authorization header's value.
const BearerPrefix = "Bearer "

// BearerChallenge is the WWW-Authenticate header of a 401 answer.
const BearerChallenge = `Bearer realm="coord"`

// Query parameters.
const (
	// ParamClientID, ParamSeq and ParamAck make a write exactly-once: a
	// session's random ID (not 0), the write's sequence number in it
	// (from 1), and the highest sequence number below which the client
	// has every answer.
	ParamClientID = "client_id"
	ParamSeq      = "seq"
	ParamAck      = "ack"
	// ParamPrevRevision makes a put or delete a compare-and-swap on the
	// key's revision (0: the key must not exist).
	ParamPrevRevision = "prev_revision"
	// ParamStale, "true", reads the receiving node's own state machine
	// instead of the leader's.
	ParamStale = "stale"
	// ParamRevision is the revision a watch waits to see change;
	// ParamTimeoutMs how long a long poll waits, in milliseconds;
	// ParamStream, "true", answers with server-sent events instead.
	ParamRevision  = "revision"
	ParamTimeoutMs = "timeout_ms"
	ParamStream    = "stream"
)

// EventChange is the event name of each server-sent event of a watch
// stream; its data is the JSON of the key or lease, its id the revision.
const EventChange = "change"

// WriteResponse is the answer to a put or delete of a key, and to a token
// revocation: the revision (log index) of the write.
type WriteResponse struct {
	Revision uint64 `json:"revision"`
}

package api

import "net/http"

// Code is the machine-readable code of an error answer. Clients decide on
// the code, never on the message.
type Code string

// The codes. Unavailable, DiskFull and StorageFailed mean not applied, so a
// retry is safe even without a session; UnknownOutcome means the server
// cannot know, and only a retry in the same session is safe.
const (
	// CodeInvalid: a malformed request, or one over a limit (400).
	CodeInvalid Code = "invalid"
	// CodeUnauthenticated: no bearer token, or one the cluster does not
	// know (401).
	CodeUnauthenticated Code = "unauthenticated"
	// CodePermissionDenied: the token's role or prefix does not allow the
	// request (403).
	CodePermissionDenied Code = "permission_denied"
	// CodeNotFound: the key or token does not exist (404).
	CodeNotFound Code = "not_found"
	// CodeConflict: a compare-and-swap found another revision (409).
	CodeConflict Code = "conflict"
	// CodeHeld: the lease is held (409).
	CodeHeld Code = "held"
	// CodeLost: the token presented is not the lease's current one (409).
	CodeLost Code = "lost"
	// CodeStaleSequence: a retry the cluster can no longer answer; not
	// applied now (409).
	CodeStaleSequence Code = "stale_sequence"
	// CodeUnavailable: not done, provably; no leader is known or
	// reachable (503).
	CodeUnavailable Code = "unavailable"
	// CodeUnknownOutcome: a write that may or may not apply (503).
	CodeUnknownOutcome Code = "unknown_outcome"
	// CodeTimeout: the request's own deadline passed (503).
	CodeTimeout Code = "timeout"
	// CodeTooManyWatches: the node serves its maximum of watches (503).
	CodeTooManyWatches Code = "too_many_watches"
	// CodeStorageFailed: the node's storage fails; not applied (503).
	CodeStorageFailed Code = "storage_failed"
	// CodeDiskFull: the node's disk is full; not applied (507).
	CodeDiskFull Code = "disk_full"
	// CodeInternal: a bug; the message says what (500).
	CodeInternal Code = "internal"
)

var codeStatus = map[Code]int{
	CodeInvalid:          http.StatusBadRequest,
	CodeUnauthenticated:  http.StatusUnauthorized,
	CodePermissionDenied: http.StatusForbidden,
	CodeNotFound:         http.StatusNotFound,
	CodeConflict:         http.StatusConflict,
	CodeHeld:             http.StatusConflict,
	CodeLost:             http.StatusConflict,
	CodeStaleSequence:    http.StatusConflict,
	CodeUnavailable:      http.StatusServiceUnavailable,
	CodeUnknownOutcome:   http.StatusServiceUnavailable,
	CodeTimeout:          http.StatusServiceUnavailable,
	CodeTooManyWatches:   http.StatusServiceUnavailable,
	CodeStorageFailed:    http.StatusServiceUnavailable,
	CodeDiskFull:         http.StatusInsufficientStorage,
	CodeInternal:         http.StatusInternalServerError,
}

// Status returns the HTTP status the API answers with the code; 500 for a
// code it does not know.
func (c Code) Status() int {
	if s, ok := codeStatus[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Retry reports whether an answer with the code carries Retry-After:
// another node, or this one a moment later, may succeed. A timeout is the
// request's own deadline, which a retry does not change.
func (c Code) Retry() bool {
	s := c.Status()
	return (s == http.StatusServiceUnavailable || s == http.StatusInsufficientStorage) && c != CodeTimeout
}

// ErrorResponse is the body of every error answer. The fields after Code
// are present only with the codes they name.
type ErrorResponse struct {
	// Error is the human-readable reason.
	Error string `json:"error"`
	Code  Code   `json:"code"`
	// Key is the key a not_found read or watch asked for, and the key of
	// the operation that failed when a batch is a conflict, not_found or
	// permission_denied.
	Key string `json:"key,omitempty"`
	// Revision is the key's current revision with conflict (0: absent),
	// and 0 with a not_found read or watch of a key.
	Revision *uint64 `json:"revision,omitempty"`
	// Holder and Token describe the lease as it is, with held and lost.
	Holder *string `json:"holder,omitempty"`
	Token  *uint64 `json:"token,omitempty"`
	// Leader is the leader the node knew (0: none), when unavailable or
	// unknown_outcome comes from a request it could not forward; with
	// unavailable for a write the leader refused, the node the refusing
	// one named (a leadership transfer's target, itself when busy).
	Leader *uint64 `json:"leader,omitempty"`
	// ID names the token an earlier attempt made, when a token creation
	// retried in its session is a conflict.
	ID *uint64 `json:"id,omitempty"`
}

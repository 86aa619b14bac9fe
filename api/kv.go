package api

// KeyResponse is the JSON of a key: the answer to a read or a watch of it.
type KeyResponse struct {
	Key string `json:"key"`
	// Value is the value when it is valid UTF-8; ValueBase64 (standard
	// encoding, padded) otherwise.
	Value       string `json:"value,omitempty"`
	ValueBase64 string `json:"value_base64,omitempty"`
	// Revision is the log index of the last write to the key.
	Revision uint64 `json:"revision"`
	// CreateRevision is the log index of the write that created the key;
	// Version counts the writes since (1 at creation).
	CreateRevision uint64 `json:"create_revision,omitempty"`
	Version        uint64 `json:"version,omitempty"`
}

// LeaseRequest is the JSON body of acquire, renew and release.
type LeaseRequest struct {
	Holder string `json:"holder"`
	// Token is the fencing token the holder holds (renew, release).
	Token uint64 `json:"token,omitempty"`
	// TTLMs is the time to live in whole milliseconds: required to
	// acquire, optional to renew (0: the previous TTL).
	TTLMs int64 `json:"ttl_ms,omitempty"`
}

// LeaseResponse is the JSON of a lease.
type LeaseResponse struct {
	Name string `json:"name"`
	// Holder is "" when the lease is free.
	Holder string `json:"holder"`
	// Token is the fencing token of the current (or, when free, the last)
	// tenure; 0 if never acquired.
	Token uint64 `json:"token"`
	// TTLMs is the time to live granted at the last acquire or renew.
	TTLMs int64 `json:"ttl_ms"`
	// RemainingMs is the time left by the leader's clock; present only
	// when the leader answered.
	RemainingMs *int64 `json:"remaining_ms,omitempty"`
	// Revision is the log index of the last change to the lease.
	Revision uint64 `json:"revision"`
}

// The operations of a batch (BatchOp.Op).
const (
	BatchPut    = "put"
	BatchDelete = "delete"
)

// BatchRequest is the JSON body of POST /v1/batch: puts and deletes of
// keys applied as one write, at one revision, all or none. The answer is a
// WriteResponse with that revision; a batch that does not apply changes
// nothing, and its error names the key of the operation that failed.
type BatchRequest struct {
	Ops []BatchOp `json:"ops"`
}

// BatchOp is one operation of a batch.
type BatchOp struct {
	// Op is BatchPut or BatchDelete.
	Op  string `json:"op"`
	Key string `json:"key"`
	// Value is a put's value as text; ValueBase64 (standard encoding,
	// padded) as bytes. At most one of them; neither for a delete.
	Value       string `json:"value,omitempty"`
	ValueBase64 string `json:"value_base64,omitempty"`
	// PrevRevision, if set, makes the operation a compare-and-swap on the
	// key's revision (0: the key must not exist), as ParamPrevRevision
	// does for a single put or delete.
	PrevRevision *uint64 `json:"prev_revision,omitempty"`
}

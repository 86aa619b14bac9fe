package server

import (
	"fmt"
	"time"

	"coord/internal/assert"
	"coord/internal/wire"
)

// Op says what a Command does.
type Op uint8

// The operations. Numbers are part of the log format: append only.
const (
	// OpPut sets Key to Value, if HasPrev is false or the key's revision
	// is PrevRevision (0: the key must not exist).
	OpPut Op = iota + 1
	// OpDelete removes Key, under the same condition as OpPut.
	OpDelete
	// OpAcquire makes Holder the holder of lease Key for TTL, if the lease
	// is free, and issues a new fencing token.
	OpAcquire
	// OpRenew restarts the TTL of lease Key, if Holder still holds it under
	// Token.
	OpRenew
	// OpRelease frees lease Key, if Holder still holds it under Token.
	OpRelease
	// OpExpire frees lease Key, if it is still held under Token and was
	// last renewed at log index Renewed. Only the leader's lessor proposes
	// it.
	OpExpire
	// OpTokenCreate adds the API token Value encodes (its SHA-256 hash,
	// role and prefixes: see Token); its ID is the entry's log index.
	OpTokenCreate
	// OpTokenRevoke removes the API token whose ID is Token.
	OpTokenRevoke
	// OpTokenBootstrap adds the API token Value encodes as OpTokenCreate
	// does, but only if the cluster never had a token: the leader of a
	// new secure cluster proposes it with the initial admin token.
	OpTokenBootstrap
	// OpPeerSet records the Raft transport address of a member; Value
	// encodes the member's ID and address (peers.go).
	OpPeerSet
	// OpPeerForget drops the address of a member; Value encodes its ID.
	OpPeerForget
	// OpBatch applies Ops, puts and deletes of keys each under its own
	// condition, all at the entry's index or none of them (batch.go).
	OpBatch
)

var opNames = [...]string{
	OpPut: "put", OpDelete: "delete", OpAcquire: "acquire",
	OpRenew: "renew", OpRelease: "release", OpExpire: "expire",
	OpTokenCreate: "token_create", OpTokenRevoke: "token_revoke", OpTokenBootstrap: "token_bootstrap",
	OpPeerSet: "peer_set", OpPeerForget: "peer_forget", OpBatch: "batch",
}

// String returns the operation's name.
func (o Op) String() string {
	if o.valid() {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

func (o Op) valid() bool { return o >= OpPut && o <= OpBatch }

// Limits bound what one command and the whole machine may hold. Commands
// over a limit are refused with StatusInvalid before they change anything.
//
// They are the cluster's, not a node's: Apply checks them, so every node
// must have the same Limits, or two nodes would apply one entry
// differently (a value over one node's limit and under another's would be
// stored on one and refused on the other). That is why no `coord server`
// flag sets them; changing one safely needs a value every node takes from
// the log, not a per-node setting.
type Limits struct {
	// KeyBytes bounds a key or lease name, and a holder.
	KeyBytes int
	// ValueBytes bounds a value.
	ValueBytes int
	// Sessions bounds the client sessions remembered; the least recently
	// used is evicted beyond it.
	Sessions int
	// PendingPerSession bounds the unacknowledged results one session
	// keeps; a client that sends more is refused.
	PendingPerSession int
	// TTLMax bounds a lease's time to live.
	TTLMax time.Duration
	// BatchOps bounds the operations of one batch (OpBatch), and
	// BatchBytes the bytes of their keys and values together, so that a
	// batch's log entry is no larger than the largest single put's.
	BatchOps   int
	BatchBytes int
}

// DefaultLimits returns coord's limits.
func DefaultLimits() Limits {
	return Limits{
		KeyBytes:          1024,
		ValueBytes:        1 << 20,
		Sessions:          16384,
		PendingPerSession: 1024,
		TTLMax:            time.Hour,
		BatchOps:          4096,
		BatchBytes:        1 << 20,
	}
}

// Command is one replicated write: the Data of a normal log entry.
type Command struct {
	Op Op
	// Client, Seq and Ack make writes exactly-once. Client identifies a
	// client session (0: none); Seq numbers the client's writes from 1;
	// Ack says the client holds the results of every Seq up to Ack, so the
	// machine may forget them.
	Client uint64
	Seq    uint64
	Ack    uint64

	// Key is the key (OpPut, OpDelete) or the lease name.
	Key   string
	Value []byte
	// HasPrev makes OpPut and OpDelete conditional on PrevRevision.
	HasPrev      bool
	PrevRevision uint64
	// Ops are OpBatch's operations, encoded in the Value field's place.
	Ops []BatchOp

	// Holder, Token, TTL, Renewed: the lease operations' arguments.
	Holder  string
	Token   uint64
	TTL     time.Duration
	Renewed uint64

	// Origin and Request identify a write a follower forwarded to its
	// leader as a Raft proposal: the node that took it from the client,
	// and a number unique among that node's requests. The origin knows
	// its write by them when it applies the entry (Node.ProposeForwarded).
	// Zero: not forwarded.
	Origin, Request uint64
	// HasAuth says the write was sent with an API token whose hash is
	// AuthHash (never the token itself): Apply checks the token's role and
	// prefixes against the tokens as of the entry, so that a token revoked
	// before the write's position in the log refuses it on every replica
	// alike, whatever the node that took it had applied.
	HasAuth  bool
	AuthHash [TokenHashBytes]byte
}

// commandVersion is the first byte of an encoded Command: version 1 holds
// the fields up to Renewed; version 2 adds Origin, Request and the token
// hash. A command without those is encoded as version 1, byte for byte as
// before.
const (
	commandVersion     = 1
	commandVersionAuth = 2
)

// Marshal encodes the command: a version byte, the op, then its fields as
// uvarints and length-prefixed bytes.
func (c Command) Marshal() []byte {
	value := c.Value
	if c.Op == OpBatch {
		value = marshalBatchOps(c.Ops)
	}
	e := wire.Encoder{Buf: make([]byte, 0, 32+len(c.Key)+len(value)+len(c.Holder))}
	v2 := c.Origin != 0 || c.Request != 0 || c.HasAuth
	if v2 {
		e.Byte(commandVersionAuth)
	} else {
		e.Byte(commandVersion)
	}
	e.Byte(byte(c.Op))
	e.Uvarint(c.Client)
	e.Uvarint(c.Seq)
	e.Uvarint(c.Ack)
	e.String(c.Key)
	e.Bytes(value)
	e.Bool(c.HasPrev)
	e.Uvarint(c.PrevRevision)
	e.String(c.Holder)
	e.Uvarint(c.Token)
	e.Varint(int64(c.TTL))
	e.Uvarint(c.Renewed)
	if v2 {
		e.Uvarint(c.Origin)
		e.Uvarint(c.Request)
		if c.HasAuth {
			e.Bytes(c.AuthHash[:])
		} else {
			e.Bytes(nil)
		}
	}
	return e.Buf
}

// maxEncodedField bounds any length-prefixed field when decoding, whatever
// the Limits: a decoder must not allocate what a corrupt length asks.
const maxEncodedField = 64 << 20

// UnmarshalCommand decodes what Command.Marshal encoded. Errors wrap
// ErrMalformed.
func UnmarshalCommand(data []byte) (Command, error) {
	d := wire.NewDecoder(data, ErrMalformed)
	v := d.Byte("version")
	if d.Err() == nil && v != commandVersion && v != commandVersionAuth {
		return Command{}, fmt.Errorf("%w: command version %d", ErrMalformed, v)
	}
	var c Command
	c.Op = Op(d.Byte("op"))
	c.Client = d.Uvarint("client")
	c.Seq = d.Uvarint("seq")
	c.Ack = d.Uvarint("ack")
	c.Key = d.String("key", maxEncodedField)
	c.Value = d.Bytes("value", maxEncodedField)
	c.HasPrev = d.Bool("has prev")
	c.PrevRevision = d.Uvarint("prev revision")
	c.Holder = d.String("holder", maxEncodedField)
	c.Token = d.Uvarint("token")
	c.TTL = time.Duration(d.Varint("ttl"))
	c.Renewed = d.Uvarint("renewed")
	if v == commandVersionAuth {
		c.Origin = d.Uvarint("origin")
		c.Request = d.Uvarint("request")
		switch hash := d.Bytes("token hash", TokenHashBytes); {
		case d.Err() != nil:
		case len(hash) == TokenHashBytes:
			c.HasAuth = true
			copy(c.AuthHash[:], hash)
		case len(hash) != 0:
			d.Fail(fmt.Sprintf("token hash of %d bytes", len(hash)))
		}
	}
	if err := d.Done(); err != nil {
		return Command{}, fmt.Errorf("command: %w", err)
	}
	if !c.Op.valid() {
		return Command{}, fmt.Errorf("%w: command op %d", ErrMalformed, c.Op)
	}
	if c.Op == OpBatch {
		ops, err := unmarshalBatchOps(c.Value)
		if err != nil {
			return Command{}, fmt.Errorf("command: %w", err)
		}
		c.Ops, c.Value = ops, nil
	}
	if len(c.Value) == 0 {
		c.Value = nil
	}
	return c, nil
}

// Status is the outcome of a command.
type Status uint8

// The statuses. Numbers are part of the snapshot format: append only.
const (
	// StatusOK: the command took effect.
	StatusOK Status = iota
	// StatusNotFound: the key to delete does not exist.
	StatusNotFound
	// StatusConflict: the key's revision is not PrevRevision; Result.Revision
	// is the current one (0: absent).
	StatusConflict
	// StatusHeld: the lease is held; Result.Holder and Token say by whom.
	StatusHeld
	// StatusLost: the token presented is not the lease's current one.
	StatusLost
	// StatusStaleSequence: the client already acknowledged this sequence
	// number, or its session was forgotten; the write was not applied now.
	StatusStaleSequence
	// StatusInvalid: the command broke a limit or was malformed.
	StatusInvalid
	// StatusUnauthenticated: the token the write was sent with
	// (Command.AuthHash) was unknown or revoked as of the write's entry.
	StatusUnauthenticated
	// StatusForbidden: that token's role or prefixes did not allow the
	// write as of its entry.
	StatusForbidden
)

var statusNames = [...]string{
	StatusOK: "ok", StatusNotFound: "not_found", StatusConflict: "conflict",
	StatusHeld: "held", StatusLost: "lost", StatusStaleSequence: "stale_sequence",
	StatusInvalid: "invalid", StatusUnauthenticated: "unauthenticated", StatusForbidden: "forbidden",
}

// String returns the status's name, as the HTTP API spells it.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Result is what applying a command produced.
type Result struct {
	Status Status
	// Revision: for keys, the revision written (or the current one on
	// StatusConflict); for leases, the revision of the lease record.
	Revision uint64
	// Holder, Token and TTL describe the lease after the command (or the
	// current holder on StatusHeld and StatusLost).
	Holder string
	Token  uint64
	TTL    time.Duration
	// Key names, in a failed OpBatch's result (StatusNotFound,
	// StatusConflict or StatusForbidden), the key of the operation that
	// failed.
	Key string
	// Reason explains StatusInvalid.
	Reason string
}

// encode writes r for a snapshot's session table. Holder and Key share
// one field, the one Holder alone once had, so that snapshots read alike
// by builds before and after Key: a lease's result (StatusOK, StatusHeld,
// StatusLost) has no Key, and a failed batch's, with a status no lease
// operation returns, no Holder (keyStatus).
func (r Result) encode(e *wire.Encoder) {
	assert.That(r.Holder == "" || r.Key == "", "server: result %v has holder %q and key %q", r.Status, r.Holder, r.Key)
	e.Byte(byte(r.Status))
	e.Uvarint(r.Revision)
	e.String(r.Holder + r.Key)
	e.Uvarint(r.Token)
	e.Varint(int64(r.TTL))
	e.String(r.Reason)
}

func decodeResult(d *wire.Decoder) Result {
	var r Result
	r.Status = Status(d.Byte("status"))
	r.Revision = d.Uvarint("revision")
	holderOrKey := d.String("holder", maxEncodedField)
	r.Token = d.Uvarint("token")
	r.TTL = time.Duration(d.Varint("ttl"))
	r.Reason = d.String("reason", maxEncodedField)
	if d.Err() == nil && int(r.Status) >= len(statusNames) {
		d.Fail(fmt.Sprintf("status %d", r.Status))
	}
	if keyStatus(r.Status) {
		r.Key = holderOrKey
	} else {
		r.Holder = holderOrKey
	}
	return r
}

// keyStatus reports whether a result of status s may name a failed
// batch's key (Result.Key): a lease operation never returns it.
func keyStatus(s Status) bool {
	return s == StatusNotFound || s == StatusConflict || s == StatusForbidden
}

package server

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"coord/internal/assert"

	"github.com/google/btree"
)

// KeyValue is a key as the machine holds it.
type KeyValue struct {
	Key   string
	Value []byte
	// CreateRevision is the log index of the write that created the key;
	// Revision (the mod revision) the index of the last write to it.
	CreateRevision uint64
	Revision       uint64
	// Version counts the writes since the key was created (1 at creation).
	Version uint64
}

// Lease is a lease record as the machine holds it.
type Lease struct {
	Name string
	// Holder holds the lease; "" when it is free.
	Holder string
	// Token is the fencing token of the current (or, when free, the last)
	// tenure: the log index of its Acquire. 0 if never acquired.
	Token uint64
	// TTL is the time to live granted at the last Acquire or Renew.
	TTL time.Duration
	// Renewed is the log index of the last Acquire or Renew.
	Renewed uint64
	// Revision is the log index of the last change to the record.
	Revision uint64
}

// Held reports whether someone holds the lease.
func (l Lease) Held() bool { return l.Holder != "" }

// kvItem is a key as the machine's B-tree holds it: one string that holds
// the key's length, the key, the value and the key's revisions, so that a
// key costs one allocation besides its slot in a tree node, the slot is
// only a string header (16 bytes), and nothing in it is ever written in
// place (a snapshot's view shares it). The layout:
//
//	key length (4 bytes, little endian), key, value,
//	create revision, revision, version (8 bytes each, little endian)
//
// The slot is what a tree node holds for each key, in an array of room for
// twice the degree, about half of it used after keys were inserted in
// order (a node splits at its middle), and what a snapshot's copy-on-write
// copies for every node a write reaches: 48 bytes of fields made the
// nodes of 500,000 keys 48 MB, now 16 MB (docs/BENCHMARKS.md, "Memory at
// 500k keys"). The revisions are read only by a put and a read of the key,
// never by the comparisons of a descent.
type kvItem struct {
	rec string
}

// kvHeaderBytes and kvTrailerBytes are the sizes of a record's key length
// and of its revisions.
const (
	kvHeaderBytes  = 4
	kvTrailerBytes = 24
)

// newKVItem returns the record of key with value and its revisions.
func newKVItem(key, value string, createRevision, revision, version uint64) kvItem {
	var b strings.Builder
	b.Grow(kvHeaderBytes + len(key) + len(value) + kvTrailerBytes)
	var word [8]byte
	binary.LittleEndian.PutUint32(word[:4], uint32(len(key)))
	b.Write(word[:4])
	b.WriteString(key)
	b.WriteString(value)
	for _, v := range [3]uint64{createRevision, revision, version} {
		binary.LittleEndian.PutUint64(word[:], v)
		b.Write(word[:])
	}
	return kvItem{rec: b.String()}
}

// keyItem returns an item to look key up by: its key only, no revisions.
func keyItem(key string) kvItem {
	var word [kvHeaderBytes]byte
	binary.LittleEndian.PutUint32(word[:], uint32(len(key)))
	return kvItem{rec: string(word[:]) + key}
}

func (it kvItem) keyLen() int {
	r := it.rec
	return int(uint32(r[0]) | uint32(r[1])<<8 | uint32(r[2])<<16 | uint32(r[3])<<24)
}

func (it kvItem) key() string { return it.rec[kvHeaderBytes : kvHeaderBytes+it.keyLen()] }

func (it kvItem) value() string {
	return it.rec[kvHeaderBytes+it.keyLen() : len(it.rec)-kvTrailerBytes]
}

// word returns the trailer's i-th revision (0: create revision, 1:
// revision, 2: version); 0 for the zero item (a miss) or a key-only one.
func (it kvItem) word(i int) uint64 {
	if len(it.rec) < kvHeaderBytes+kvTrailerBytes || len(it.rec) < kvHeaderBytes+it.keyLen()+kvTrailerBytes {
		return 0
	}
	w := it.rec[len(it.rec)-kvTrailerBytes+8*i:][:8]
	return uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
}

func (it kvItem) createRevision() uint64 { return it.word(0) }
func (it kvItem) revision() uint64       { return it.word(1) }
func (it kvItem) version() uint64        { return it.word(2) }

// size is what the record adds to a snapshot's key and value bytes.
func (it kvItem) size() int64 { return int64(len(it.rec) - kvHeaderBytes - kvTrailerBytes) }

func (it kvItem) keyValue() KeyValue {
	kv := KeyValue{Key: it.key(), CreateRevision: it.createRevision(), Revision: it.revision(), Version: it.version()}
	if v := it.value(); v != "" {
		kv.Value = []byte(v)
	}
	return kv
}

func kvLess(a, b kvItem) bool { return a.key() < b.key() }

func leaseLess(a, b Lease) bool { return a.Name < b.Name }

// treeDegree is the B-trees' degree (nodes of 31 to 63 items), etcd's
// choice for its key index.
const treeDegree = 32

// session remembers one client's results until the client acknowledges
// them (Raft dissertation §6.3).
type session struct {
	acked   uint64
	results map[uint64]Result
	// lastUsed is the log index of the last command of the session; the
	// least recently used session is evicted first.
	lastUsed uint64
}

// Machine is the replicated state machine: keys with revisions, leases with
// fencing tokens, and client sessions. It is pure and deterministic: the
// same commands at the same indexes give the same state and results on
// every replica.
//
// Keys and leases live in copy-on-write B-trees (github.com/google/btree),
// so that SnapshotView takes a point-in-time view in constant time, which
// another goroutine writes out while the machine goes on applying
// (docs/storage.md says why this store and not bbolt or pebble).
//
// Machine is not safe for concurrent use; the server applies commands on
// one goroutine and guards reads with a lock. A SnapshotView, once taken,
// is safe to use from another goroutine while the machine changes.
type Machine struct {
	limits  Limits
	applied uint64
	keys    *btree.BTreeG[kvItem]
	leases  *btree.BTreeG[Lease]
	// keyBytes is the size of every key and value held, for sizing a
	// snapshot's buffer up front.
	keyBytes int64
	sessions map[uint64]*session
	// peers maps member IDs to their Raft transport addresses, as
	// OpPeerSet recorded them (peers.go); kept here so that a node
	// restarted from its snapshot and log knows where its peers are.
	peers map[uint64]string
	// tokens are the API's bearer tokens by ID, tokenIDs their IDs by
	// hash; tokensEver is set by the first token ever made, after which
	// OpTokenBootstrap does nothing (see tokens.go).
	tokens     map[uint64]*Token
	tokenIDs   map[[TokenHashBytes]byte]uint64
	tokensEver bool
}

// NewMachine returns an empty machine with the given limits.
func NewMachine(limits Limits) *Machine {
	if limits.KeyBytes <= 0 || limits.ValueBytes <= 0 || limits.Sessions <= 0 ||
		limits.PendingPerSession <= 0 || limits.TTLMax <= 0 || limits.BatchOps <= 0 || limits.BatchBytes <= 0 {
		assert.Fail("server: limits must be positive: %+v", limits)
	}
	return &Machine{
		limits:   limits,
		keys:     btree.NewG(treeDegree, kvLess),
		leases:   btree.NewG(treeDegree, leaseLess),
		sessions: map[uint64]*session{},
		peers:    map[uint64]string{},
		tokens:   map[uint64]*Token{},
		tokenIDs: map[[TokenHashBytes]byte]uint64{},
	}
}

// Applied returns the index of the last entry applied.
func (m *Machine) Applied() uint64 { return m.applied }

// Advance records that the entry at index, which carries no command (an
// empty entry of a new leader, a membership change), was applied.
func (m *Machine) Advance(index uint64) {
	if index <= m.applied {
		assert.Fail("server: advance to %d, already applied %d", index, m.applied)
	}
	m.applied = index
}

// Peers returns the transport addresses recorded by OpPeerSet.
func (m *Machine) Peers() map[uint64]string {
	out := make(map[uint64]string, len(m.peers))
	for id, addr := range m.peers {
		out[id] = addr
	}
	return out
}

// Apply applies the encoded command data committed at index. Malformed data
// is a result (StatusInvalid), not a panic: every replica decodes the same
// bytes the same way, so they all refuse it alike.
func (m *Machine) Apply(index uint64, data []byte) Result {
	if len(data) == 0 {
		m.Advance(index)
		return Result{}
	}
	cmd, err := UnmarshalCommand(data)
	if err != nil {
		m.Advance(index)
		return Result{Status: StatusInvalid, Reason: err.Error()}
	}
	return m.ApplyCommand(index, cmd)
}

// ApplyCommand applies cmd, committed at index. Indexes must grow.
func (m *Machine) ApplyCommand(index uint64, cmd Command) Result {
	m.Advance(index)
	if res, ok := m.authorize(cmd); !ok {
		return res
	}
	if cmd.Client == 0 {
		return m.execute(index, cmd)
	}
	s := m.sessions[cmd.Client]
	if s == nil {
		if cmd.Ack != 0 {
			// The client has had results from a session this machine no
			// longer knows: it was evicted, and a retry could be a
			// duplicate. Refuse rather than risk applying twice.
			return Result{Status: StatusStaleSequence, Reason: "session unknown (evicted?)"}
		}
		s = &session{results: map[uint64]Result{}}
		m.sessions[cmd.Client] = s
		m.evictSessions(cmd.Client)
	}
	s.lastUsed = index
	if r, ok := s.results[cmd.Seq]; ok {
		return r // a retry: the same answer, applied once
	}
	if cmd.Seq == 0 || cmd.Seq <= s.acked {
		return Result{Status: StatusStaleSequence, Reason: fmt.Sprintf("sequence %d already acknowledged (ack %d)", cmd.Seq, s.acked)}
	}
	if cmd.Ack > s.acked && cmd.Ack < cmd.Seq {
		s.acked = cmd.Ack
		for seq := range s.results {
			if seq <= s.acked {
				delete(s.results, seq)
			}
		}
	}
	if len(s.results) >= m.limits.PendingPerSession {
		return Result{Status: StatusInvalid, Reason: fmt.Sprintf("more than %d unacknowledged writes in one session", m.limits.PendingPerSession)}
	}
	r := m.execute(index, cmd)
	s.results[cmd.Seq] = r
	return r
}

// authorize checks the token a command carries (Command.HasAuth) against
// the tokens as of this entry: the decision is the log's, the same on every
// replica, whatever the node that took the write had applied when it
// checked the token itself. Before the session checks: a revoked token
// does not get even a retry's remembered answer. A command without a token
// hash passes (the API checked it, or runs without tokens).
func (m *Machine) authorize(c Command) (Result, bool) {
	if !c.HasAuth {
		return Result{}, true
	}
	t, ok := m.TokenByHash(c.AuthHash)
	if !ok {
		return Result{Status: StatusUnauthenticated, Reason: "unknown or revoked token (as of this write's entry)"}, false
	}
	if c.Op == OpBatch {
		if key, denied := batchDenial(t, c.Ops); denied {
			need := access{role: TokenWrite, scope: scopeKey}
			return Result{Status: StatusForbidden, Key: key, Reason: denial(t, need, key) + " (as of this write's entry)"}, false
		}
		return Result{}, true
	}
	need := access{role: TokenAdmin}
	switch c.Op {
	case OpPut, OpDelete:
		need = access{role: TokenWrite, scope: scopeKey}
	case OpAcquire, OpRenew, OpRelease:
		need = access{role: TokenWrite, scope: scopeLease}
	}
	if !t.allows(need.role, need.scope, c.Key) {
		return Result{Status: StatusForbidden, Reason: denial(t, need, c.Key) + " (as of this write's entry)"}, false
	}
	return Result{}, true
}

// evictSessions forgets the least recently used sessions beyond the limit,
// never keep (the one just created). Ties break on the client id, so that
// every replica evicts the same one.
func (m *Machine) evictSessions(keep uint64) {
	for len(m.sessions) > m.limits.Sessions {
		var victim uint64
		var oldest *session
		for id, s := range m.sessions {
			if id == keep {
				continue
			}
			if oldest == nil || s.lastUsed < oldest.lastUsed || (s.lastUsed == oldest.lastUsed && id < victim) {
				victim, oldest = id, s
			}
		}
		delete(m.sessions, victim)
	}
}

// execute performs the command itself, after the session checks.
func (m *Machine) execute(index uint64, c Command) Result {
	switch c.Op {
	case OpTokenCreate, OpTokenBootstrap, OpTokenRevoke:
		return m.executeToken(index, c)
	case OpPeerSet, OpPeerForget:
		return m.executePeer(index, c)
	case OpBatch:
		return m.batch(index, c)
	}
	if reason := m.check(c); reason != "" {
		return Result{Status: StatusInvalid, Reason: reason}
	}
	switch c.Op {
	case OpPut:
		return m.put(index, c)
	case OpDelete:
		return m.delete(index, c)
	case OpAcquire:
		return m.acquire(index, c)
	case OpRenew:
		return m.renew(index, c)
	case OpRelease:
		return m.release(index, c)
	case OpExpire:
		return m.expire(index, c)
	}
	return Result{Status: StatusInvalid, Reason: "unknown op " + c.Op.String()}
}

// check returns why c breaks a limit, or "".
func (m *Machine) check(c Command) string {
	switch {
	case c.Key == "":
		return "empty key or lease name"
	case len(c.Key) > m.limits.KeyBytes:
		return fmt.Sprintf("key of %d bytes over the limit of %d", len(c.Key), m.limits.KeyBytes)
	case len(c.Value) > m.limits.ValueBytes:
		return fmt.Sprintf("value of %d bytes over the limit of %d", len(c.Value), m.limits.ValueBytes)
	case len(c.Holder) > m.limits.KeyBytes:
		return fmt.Sprintf("holder of %d bytes over the limit of %d", len(c.Holder), m.limits.KeyBytes)
	}
	switch c.Op {
	case OpAcquire, OpRenew, OpRelease:
		if c.Holder == "" {
			return "empty holder"
		}
	}
	switch c.Op {
	case OpAcquire:
		if c.TTL <= 0 || c.TTL > m.limits.TTLMax {
			return fmt.Sprintf("ttl %v out of range (0, %v]", c.TTL, m.limits.TTLMax)
		}
	case OpRenew:
		if c.TTL < 0 || c.TTL > m.limits.TTLMax {
			return fmt.Sprintf("ttl %v out of range [0, %v]", c.TTL, m.limits.TTLMax)
		}
	}
	return ""
}

func (m *Machine) revision(key string) uint64 {
	it, _ := m.keys.Get(keyItem(key))
	return it.revision()
}

func (m *Machine) put(index uint64, c Command) Result {
	old, exists := m.keys.Get(keyItem(c.Key))
	if c.HasPrev && old.revision() != c.PrevRevision {
		return Result{Status: StatusConflict, Revision: old.revision()}
	}
	createRevision, version := index, uint64(1)
	if exists {
		createRevision, version = old.createRevision(), old.version()+1
		m.keyBytes -= old.size()
	}
	it := newKVItem(c.Key, string(c.Value), createRevision, index, version)
	m.keyBytes += it.size()
	m.keys.ReplaceOrInsert(it)
	return Result{Revision: index}
}

func (m *Machine) delete(index uint64, c Command) Result {
	cur := m.revision(c.Key)
	if c.HasPrev && cur != c.PrevRevision {
		return Result{Status: StatusConflict, Revision: cur}
	}
	if cur == 0 {
		return Result{Status: StatusNotFound}
	}
	if old, ok := m.keys.Delete(keyItem(c.Key)); ok {
		m.keyBytes -= old.size()
	}
	return Result{Revision: index}
}

// lease returns the record of name, recording a free one if there was
// none (so that every replica holds the same records); setLease stores a
// changed record.
func (m *Machine) lease(name string) Lease {
	l, ok := m.leases.Get(Lease{Name: name})
	if !ok {
		l = Lease{Name: name}
		m.leases.ReplaceOrInsert(l)
	}
	return l
}

func (m *Machine) setLease(l Lease) { m.leases.ReplaceOrInsert(l) }

func leaseResult(s Status, l Lease) Result {
	return Result{Status: s, Revision: l.Revision, Holder: l.Holder, Token: l.Token, TTL: l.TTL}
}

func (m *Machine) acquire(index uint64, c Command) Result {
	l := m.lease(c.Key)
	if l.Held() {
		return leaseResult(StatusHeld, l)
	}
	l = Lease{Name: c.Key, Holder: c.Holder, Token: index, TTL: c.TTL, Renewed: index, Revision: index}
	m.setLease(l)
	return leaseResult(StatusOK, l)
}

func (m *Machine) renew(index uint64, c Command) Result {
	l := m.lease(c.Key)
	if !l.Held() || l.Holder != c.Holder || l.Token != c.Token {
		return leaseResult(StatusLost, l)
	}
	if c.TTL > 0 {
		l.TTL = c.TTL
	}
	l.Renewed, l.Revision = index, index
	m.setLease(l)
	return leaseResult(StatusOK, l)
}

func (m *Machine) release(index uint64, c Command) Result {
	l := m.lease(c.Key)
	if !l.Held() || l.Holder != c.Holder || l.Token != c.Token {
		return leaseResult(StatusLost, l)
	}
	l.Holder, l.TTL, l.Revision = "", 0, index
	m.setLease(l)
	return leaseResult(StatusOK, l)
}

func (m *Machine) expire(index uint64, c Command) Result {
	l := m.lease(c.Key)
	// Free the lease only if the leader's deadline was about the tenure and
	// the renewal it names: a renewal applied after the leader decided, but
	// before this entry, keeps the lease.
	if !l.Held() || l.Token != c.Token || l.Renewed != c.Renewed {
		return leaseResult(StatusLost, l)
	}
	l.Holder, l.TTL, l.Revision = "", 0, index
	m.setLease(l)
	return leaseResult(StatusOK, l)
}

// Get returns the key, and whether it exists.
func (m *Machine) Get(key string) (KeyValue, bool) {
	it, ok := m.keys.Get(keyItem(key))
	if !ok {
		return KeyValue{Key: key}, false
	}
	return it.keyValue(), true
}

// Lease returns the lease record of name; a lease never acquired is
// returned free with Token 0.
func (m *Machine) Lease(name string) Lease {
	l, _ := m.leases.Get(Lease{Name: name})
	l.Name = name
	return l
}

// HeldLeases returns every held lease, in name order.
func (m *Machine) HeldLeases() []Lease {
	var held []Lease
	m.leases.Ascend(func(l Lease) bool {
		if l.Held() {
			held = append(held, l)
		}
		return true
	})
	return held
}

// Len returns the number of keys, leases and sessions held.
func (m *Machine) Len() (keys, leases, sessions int) {
	return m.keys.Len(), m.leases.Len(), len(m.sessions)
}

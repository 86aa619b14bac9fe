package server

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"coord/api"
	"coord/node"
	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/vfs"
	"coord/transport/tcp"
)

// ErrOutcomeUnknown means a write may or may not have been applied: it was
// appended to the leader's log, then the node lost leadership, stopped, or
// ran out of time before it could tell whether the write committed. A
// client with a session may retry it safely; the API answers 503
// unknown_outcome.
var ErrOutcomeUnknown = errors.New("server: outcome unknown")

// ErrStorage means this node's storage is failing (a full disk, an I/O
// error): it takes no writes until a retry succeeds, and the write was not
// applied. It wraps the cause (vfs.IsNoSpace tells a full disk); the API
// answers 507 disk_full or 503 storage_failed.
var ErrStorage = errors.New("server: storage failing")

// ErrDataDir means the data directory must not be used by this node: its
// log or files are missing or damaged, it belongs to another node or
// cluster, or it holds Raft state but no identity. Nothing in it was
// changed. The message says what is wrong and how to recover.
var ErrDataDir = errors.New("server: data directory refused")

// Config configures a Node. Start from DefaultConfig.
type Config struct {
	// ID is this node's ID; never 0.
	ID uint64
	// Peers maps the initial voters' IDs, this node's included, to their
	// Raft transport addresses. A brand-new node of a new cluster
	// bootstraps with them as its voters. Every other address is
	// replicated state (peers.go): a restarting node needs only its own
	// here, a joining one its own and the leader's. An address given here
	// wins over the replicated one for this node's own dialing (a proxy,
	// a NAT).
	Peers map[uint64]string
	// Join says this node joins an existing cluster (it was added with
	// AddMember): it does not bootstrap, and waits for the leader.
	Join bool
	// ClusterID names the cluster, as recorded in the data directory's
	// identity when the node is created. 0: when bootstrapping, derive it
	// from Peers (every initial member then agrees); when joining, record
	// it as unknown. A non-zero ClusterID must match the identity of an
	// existing data directory.
	ClusterID uint64
	// PeerListener, if not nil, is where the Raft transport accepts;
	// otherwise it listens on Peers[ID].
	PeerListener net.Listener
	// HTTPAddr is the address of this node's API, told to its peers so
	// that they can forward requests to it.
	HTTPAddr string
	// DataDir holds the write-ahead log and snapshots.
	DataDir string
	// FS is the file system DataDir is on. Nil: the real one.
	FS vfs.FS

	// TickInterval is the length of one Raft tick.
	TickInterval time.Duration
	// ElectionTicks and HeartbeatTicks are the Raft timeouts in ticks (an
	// election timeout is drawn from [ElectionTicks, 2*ElectionTicks)).
	ElectionTicks, HeartbeatTicks int
	// SnapshotEntries is how many entries are applied between snapshots
	// of the state machine (after which the log is compacted).
	SnapshotEntries uint64
	// SnapshotBytes, if not 0, also takes a snapshot once this much entry
	// data was applied since the last: the log since a snapshot stays on
	// disk and in memory until the next, and 10,000 batches of 1 MiB would
	// be 10 GiB of it.
	SnapshotBytes uint64
	// SnapshotLogPercent, if not 0, holds a snapshot back until the entry
	// data applied since the last reaches this percentage of the last
	// one's size (node.Config.SnapshotLogPercent), so that snapshots cost
	// the same per write however large the state: at 500,000 keys a
	// snapshot every 10,000 entries took a third of the machine.
	SnapshotLogPercent uint64
	// WALSegmentBytes bounds the write-ahead log's segments; 0 means
	// wal.DefaultSegmentBytes.
	WALSegmentBytes int64
	// Limits bounds commands and the state machine.
	Limits Limits
	// Seed seeds the election timeouts and where a follower's read index
	// requests start numbering; 0 draws one at random. A fixed seed is for
	// tests: restarted with it, a node replays the same draws, and an
	// answer to a request of its earlier run, delayed across the restart,
	// could be taken for one of the new run's (raft.Config.Rand).
	Seed uint64
	// PeerCloseHint makes a follower take its leader's connection closing
	// from the leader's end as a hint that the leader's process died, and
	// elect a new leader at once rather than after the election timeout
	// (raft.Core.ReportPeerGone, docs/raft.md). DefaultConfig sets it.
	PeerCloseHint bool
	// HandOverMax bounds how long Serve, asked to stop while this node
	// leads, waits for another voter to take leadership over (HandOver)
	// before it stops anyway; 0 stops without handing over, and the others
	// elect a leader as after a crash. DefaultConfig sets 1 s.
	HandOverMax time.Duration
	// LeaseSessionGrace is how long the leader waits, after a raft://
	// lease holder's session stream closes from the holder's side, before
	// it frees the lease (APIConfig.SessionGrace; the holder gives up
	// after half of it). Zero: SessionGraceDefault. At least
	// LeaseSessionGraceMin, at most LeaseSessionGraceMax.
	LeaseSessionGrace time.Duration

	// Logger logs the node's life. Nil: slog.Default().
	Logger *slog.Logger
	// Metrics, if set, is updated as the node runs.
	Metrics *Metrics
	// Security, if set, runs the transport over mutual TLS and makes the
	// initial admin token (security.go). Nil: insecure.
	Security *Security
	// HTTP bounds the clients of the node's HTTP API (Serve). Zero:
	// DefaultHTTPLimits().
	HTTP HTTPLimits
	// Pprof serves the Go profiler on the API at /debug/pprof/, for admin
	// tokens (Serve).
	Pprof bool
	// HTTP2 serves the API over HTTP/2 as well as HTTP/1.1 (Serve,
	// --http2): over TLS to clients that offer "h2" in ALPN, in plain mode
	// to clients that open with HTTP/2's preface (h2c with prior
	// knowledge). HTTP/1.1 clients are served as before either way.
	HTTP2 bool
	// NoWire stops Serve from serving the API over coord's multiplexed
	// connection (package apiwire) beside HTTP (--wire=false).
	NoWire bool
}

// frameHeadroomBytes is kept in a transport frame, beside a command's key
// and value, for the rest of the command (holder, session, auth hash) and
// the message around it.
const frameHeadroomBytes = 64 << 10

// DefaultConfig returns coord's defaults: ticks of 100 ms, elections after
// 1 to 2 s of silence, heartbeats every 100 ms, a snapshot every 10,000
// entries.
func DefaultConfig() Config {
	rc := raft.DefaultConfig()
	return Config{
		TickInterval:    100 * time.Millisecond,
		ElectionTicks:   rc.ElectionTicks,
		HeartbeatTicks:  rc.HeartbeatTicks,
		SnapshotEntries: 10000,
		SnapshotBytes:   node.DefaultSnapshotBytes,
		Limits:          DefaultLimits(),
		HTTP:            DefaultHTTPLimits(),
		PeerCloseHint:   true,
		HandOverMax:     time.Second,

		SnapshotLogPercent: node.DefaultSnapshotLogPercent,
	}
}

// Validate names the first field missing or out of range.
func (c Config) Validate() error {
	switch {
	case c.ID == 0:
		return fmt.Errorf("%w: ID must not be 0", ErrInvalid)
	case c.Peers[c.ID] == "" && c.PeerListener == nil:
		return fmt.Errorf("%w: Peers has no address for this node (%d)", ErrInvalid, c.ID)
	case c.DataDir == "":
		return fmt.Errorf("%w: DataDir is empty", ErrInvalid)
	case c.TickInterval <= 0:
		return fmt.Errorf("%w: TickInterval %v must be positive", ErrInvalid, c.TickInterval)
	case c.HeartbeatTicks <= 0 || c.ElectionTicks <= c.HeartbeatTicks:
		return fmt.Errorf("%w: want 0 < HeartbeatTicks (%d) < ElectionTicks (%d)", ErrInvalid, c.HeartbeatTicks, c.ElectionTicks)
	case c.SnapshotEntries == 0:
		return fmt.Errorf("%w: SnapshotEntries must be positive", ErrInvalid)
	case c.Limits.KeyBytes+c.Limits.ValueBytes > tcp.DefaultConfig().MaxFrameBytes-frameHeadroomBytes:
		// A command must fit in one transport frame, or the leader's
		// append of it would be dropped at every attempt, for ever.
		return fmt.Errorf("%w: Limits.KeyBytes %d + Limits.ValueBytes %d over the peer transport's frame of %d bytes less %d for the rest of a command",
			ErrInvalid, c.Limits.KeyBytes, c.Limits.ValueBytes, tcp.DefaultConfig().MaxFrameBytes, frameHeadroomBytes)
	case c.Limits.BatchBytes+c.Limits.BatchOps*batchOpOverheadBytes > tcp.DefaultConfig().MaxFrameBytes-frameHeadroomBytes:
		// A batch too: its keys and values, and each op's encoding.
		return fmt.Errorf("%w: Limits.BatchBytes %d + %d bytes for each of Limits.BatchOps %d over the peer transport's frame of %d bytes less %d for the rest of a command",
			ErrInvalid, c.Limits.BatchBytes, batchOpOverheadBytes, c.Limits.BatchOps, tcp.DefaultConfig().MaxFrameBytes, frameHeadroomBytes)
	case c.HandOverMax < 0:
		return fmt.Errorf("%w: HandOverMax %v must not be negative", ErrInvalid, c.HandOverMax)
	case c.LeaseSessionGrace != 0 && (c.LeaseSessionGrace < LeaseSessionGraceMin || c.LeaseSessionGrace > LeaseSessionGraceMax):
		return fmt.Errorf("%w: LeaseSessionGrace %v: want %v to %v (the holder gives up after half of it, and keep-alives come every %v)",
			ErrInvalid, c.LeaseSessionGrace, LeaseSessionGraceMin, LeaseSessionGraceMax, SessionKeepAliveDefault)
	}
	if err := (raftstore.Options{SegmentBytes: c.WALSegmentBytes}).Validate(); err != nil {
		return fmt.Errorf("%w: WALSegmentBytes: %v", ErrInvalid, err)
	}
	for id, addr := range c.Peers {
		if id == 0 || addr == "" {
			return fmt.Errorf("%w: peer %d at %q", ErrInvalid, id, addr)
		}
	}
	return nil
}

// Node is one member of a coord cluster: the node shell (package node:
// one goroutine owns the raft core) over durable storage
// (storage/raftstore), the TCP transport (transport/tcp) and the state
// machine (Machine). It implements Replica.
//
// Node is safe for concurrent use.
type Node struct {
	cfg   Config
	log   *slog.Logger
	disk  *raftstore.Disk
	tr    *tcp.Transport
	shell *node.Node
	sm    *stateMachine
	// obs notices peers' messages, elections and write rates for the
	// dashboard, /readyz and the per-peer metrics (observe.go).
	obs   *observer
	reads readRounds
	// renewals are the rounds that confirm renewals answered by the
	// leader (renewOnLeader): at most one every renewRoundInterval.
	renewals readRounds
	// handOverSeen, while HandOver runs, watches arriving messages for a
	// later term's leader (handover.go).
	handOverSeen atomic.Pointer[leaderSeen]
	// toldToCampaign is the last TimeoutNow a leader sent this node
	// (campaign.go): a write that comes before the node's status shows
	// the campaign is held for it all the same.
	toldToCampaign timeoutNowSeen
	// electionProposed, if set, is called when ProposeAtElection takes a
	// write to the loop to be held for an election (tests).
	electionProposed func()
	// electionAwaited, if set, is called when AwaitElection begins to
	// wait for an election's outcome (tests).
	electionAwaited func()
	// forwardGrace, if set, gives the grace a forwarded write allows its
	// deposed leader's answer (ProposeForwarded) instead of a timer of a
	// heartbeat interval (tests: the grace ends when the test says).
	forwardGrace func() <-chan time.Time
	// peerCloses counts, per peer, the connections the peer's end closed
	// (the transport's PeerClosed): a forwarded write's answer cannot
	// come over a connection closed after the write went out on it
	// (ProposeForwarded).
	peerCloses peerCloseCounts
	// forwardQueue holds the writes ProposeForwarded queued for the loop,
	// which feedForwards hands over until feedDone is closed.
	forwardQueue *forwardQueue
	feedDone     chan struct{}

	stop          chan struct{}
	watchDone     chan struct{}
	closeOnce     sync.Once
	closeErr      error
	bootstrapping atomic.Bool // an initial admin token proposal is in flight

	// routes keeps the transport dialing the replicated peer addresses
	// (peers.go); announced holds addresses that membership changes
	// written by an older coord carried, until the leader records them.
	routes         *peerRoutes
	announcedMu    sync.Mutex
	announced      map[uint64]string
	recordingPeers atomic.Bool // a proposeMissingPeers round is in flight
}

// stateMachine is the node.StateMachine: the Machine and the lessor, under
// a lock so that HTTP handlers can read while the loop applies.
type stateMachine struct {
	mu      sync.RWMutex
	machine *Machine
	lessor  *lessor
	// metrics, if not nil, counts lease transitions; commands counts the
	// commands applied, for the dashboard's write rate.
	metrics  *Metrics
	commands atomic.Uint64
	// heldChanges counts the commands and restores that changed which
	// leases are held, so that the dashboard's list of held names is
	// walked again only then (dashboard.go); heldNames caches it.
	heldChanges atomic.Uint64
	heldNames   heldNamesCache
	// leading is set while this node leads and its lessor was promoted in
	// term leaderTerm.
	leading    bool
	leaderTerm uint64
	// changed is closed at the next change of anything, if anyone took it
	// (changedTaken); watches wait on their own key's channel in watches,
	// which has its own lock (Apply and Restore take it under mu).
	changed      chan struct{}
	changedTaken bool
	watches      watchIndex
	// routes, if set, hears of every change to the peer addresses.
	routes *peerRoutes
	// log, if set, hears of restores and how long they took.
	log *slog.Logger

	// self is this node's ID; forwards are the writes it forwarded to
	// its leader and waits for in its own log (forward.go).
	self     uint64
	forwards *forwardWaiters
}

var _ node.StateMachine = (*stateMachine)(nil)

// Apply implements node.StateMachine. Malformed data is a result, never a
// panic: every replica refuses the same bytes alike.
func (s *stateMachine) Apply(index uint64, data []byte) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.notify()
	cmd, err := UnmarshalCommand(data)
	if err != nil {
		s.machine.Advance(index)
		return Result{Status: StatusInvalid, Reason: err.Error()}
	}
	s.commands.Add(1)
	leaseOp := cmd.Op == OpAcquire || cmd.Op == OpRenew || cmd.Op == OpRelease || cmd.Op == OpExpire
	var before Lease
	if leaseOp {
		before = s.machine.Lease(cmd.Key)
	}
	res := s.machine.ApplyCommand(index, cmd)
	if w, ok := watchedBy(cmd); ok && res.Status == StatusOK {
		s.watches.changed(w)
	}
	wakeBatch(&s.watches, cmd, res)
	switch {
	case leaseOp:
		after := s.machine.Lease(cmd.Key)
		s.lessor.observe(after, time.Now())
		s.metrics.leaseChanged(cmd.Op, before, after)
		if before.Held() != after.Held() {
			s.heldChanges.Add(1)
		}
	case cmd.Op == OpPeerSet || cmd.Op == OpPeerForget:
		s.routes.applied(cmd, res)
	}
	if cmd.Origin != 0 && cmd.Origin == s.self {
		s.forwards.applied(cmd.Request, res)
	}
	return res
}

// Snapshot implements node.StateMachine. The view is taken under the lock,
// in constant time; the encoding runs without it, so that the API's reads
// go on meanwhile.
func (s *stateMachine) Snapshot() ([]byte, error) {
	s.mu.Lock()
	view := s.machine.SnapshotView()
	s.mu.Unlock()
	// One buffer of the right size, not a chain of doublings. The node
	// calls this only where it cannot stream the view (SnapshotView) to
	// its storage in the background.
	b := bytes.NewBuffer(make([]byte, 0, view.SizeHint()))
	if _, err := view.WriteTo(b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// SnapshotView implements node.SnapshotViewer: the view is taken under
// the lock, in constant time, and the node writes it out in the
// background, streamed to the snapshot file, while it goes on applying.
func (s *stateMachine) SnapshotView() (io.WriterTo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.machine.SnapshotView(), nil
}

// Restore implements node.StateMachine.
func (s *stateMachine) Restore(data []byte) error {
	return s.RestoreFrom(bytes.NewReader(data), int64(len(data)))
}

// RestoreFrom implements node.StreamRestorer: PrepareRestore, then its
// install at once.
func (s *stateMachine) RestoreFrom(r io.Reader, size int64) error {
	install, err := s.PrepareRestore(r, size)
	if err != nil {
		return err
	}
	install()
	return nil
}

// PrepareRestore implements node.BackgroundRestorer: a snapshot received
// from the leader is decoded from its spooled file as it is read, never
// held whole in memory, into a new machine, off the node's loop and
// without the lock, so that the loop goes on stepping messages and the
// API's reads go on (on the old state) meanwhile. install, on the loop,
// takes the lock only to swap the state in. The log line says how long
// each took.
func (s *stateMachine) PrepareRestore(r io.Reader, size int64) (install func(), err error) {
	start := time.Now()
	fresh := NewMachine(s.machine.limits) // limits never change: no lock needed to read them
	if err := fresh.RestoreFrom(r, size); err != nil {
		return nil, err
	}
	decoded := time.Since(start)
	return func() { s.install(fresh, size, decoded) }, nil
}

// install makes fresh, decoded from a snapshot of size bytes, the
// machine's state; on the node's loop.
func (s *stateMachine) install(fresh *Machine, size int64, decoded time.Duration) {
	start := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.machine.Peers()
	*s.machine = *fresh
	if s.log != nil {
		keys, leases, _ := s.machine.Len()
		s.log.Info("state machine restored from a snapshot", "bytes", size, "keys", keys, "leases", leases,
			"decode", decoded, "swap", time.Since(start))
	}
	s.routes.restored(before, s.machine.Peers())
	// The old deadlines described another state: every held lease gets its
	// full TTL from now, as on a promotion.
	held := s.machine.HeldLeases()
	s.lessor.promote(held, time.Now())
	s.metrics.setLeasesHeld(len(held))
	s.heldChanges.Add(1)
	s.watches.changedAll()
	s.notify()
	// The entries the snapshot covers were never applied here: whether a
	// forwarded write was among them is unknown.
	s.forwards.failAll(fmt.Errorf("%w: a snapshot from the leader covered a forwarded write's entry", ErrOutcomeUnknown))
}

// notify closes the channel of Changed, if anyone took it; s.mu is held.
func (s *stateMachine) notify() {
	if s.changedTaken {
		close(s.changed)
		s.changed, s.changedTaken = make(chan struct{}), false
	}
}

// NewNode opens the node's storage, restores its state machine, starts its
// transport and runs it until Close.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.FS == nil {
		cfg.FS = vfs.OS
	}
	cfg.Peers = maps.Clone(cfg.Peers) // the caller may change its map
	n := &Node{cfg: cfg, log: logger(cfg.Logger).With("node", cfg.ID), stop: make(chan struct{}), watchDone: make(chan struct{}),
		announced: map[uint64]string{}, forwardQueue: newForwardQueue(), feedDone: make(chan struct{})}
	n.sm = &stateMachine{machine: NewMachine(cfg.Limits), lessor: newLessor(time.Second), changed: make(chan struct{}),
		metrics: cfg.Metrics, log: n.log, self: cfg.ID, forwards: newForwardWaiters()}
	n.sm.watches.bound = watchIndexBound(cfg.HTTP.WatchesMax)
	n.obs = newObserver(cfg.ID)
	if err := n.open(); err != nil {
		if n.tr != nil {
			n.tr.Close()
		}
		if n.disk != nil {
			n.disk.Close()
		}
		return nil, err
	}
	go n.watch()
	go n.feedForwards()
	return n, nil
}

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}

// timedStorage times the durable writes for the append-latency metric.
type timedStorage struct {
	*raftstore.Disk
	metrics *Metrics
}

func (t timedStorage) Save(hs raft.HardState, ents []raft.Entry, sync bool) error {
	start := time.Now()
	err := t.Disk.Save(hs, ents, sync)
	if t.metrics != nil && len(ents) > 0 {
		t.metrics.appendSeconds.Observe(time.Since(start).Seconds())
	}
	return err
}

// open starts the node in named steps: the storage (refusing a damaged or
// foreign data directory), the transport, then the shell over both and the
// state machine, which restores the snapshot. On error the caller closes
// whatever was opened.
func (n *Node) open() error {
	ds, err := n.openStorage()
	if err != nil {
		return err
	}
	// The transport hands messages to the shell, which needs the
	// transport to start: until the shell is stored, messages are
	// dropped, as a network would before the node is up.
	var shell atomic.Pointer[node.Node]
	if err := n.startTransport(&shell); err != nil {
		return err
	}
	nc := n.shellConfig(ds.fresh && !n.cfg.Join)
	s, err := node.Start(nc)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	shell.Store(s)
	n.shell = s
	n.reads.readIndex = s.ReadIndex
	n.renewals.readIndex, n.renewals.minGap = s.ReadIndex, renewRoundInterval
	n.log.Info("node started", "term", ds.hardState.Term, "commit", ds.hardState.Commit, "snapshot", ds.snapshot,
		"last_index", ds.last, "bootstrap", len(nc.Raft.Peers) > 0)
	return nil
}

// diskState is what the data directory held when the node opened it.
type diskState struct {
	hardState raft.HardState
	snapshot  uint64 // the snapshot's index, 0 if none
	last      uint64 // the last index in the log
	fresh     bool   // nothing at all: a new node
}

// openStorage opens the data directory, reads where its log stands, and
// checks (or, for a new one, records) whose it is.
func (n *Node) openStorage() (diskState, error) {
	var ds diskState
	disk, err := raftstore.Open(n.cfg.FS, n.cfg.DataDir, raftstore.Options{Logger: n.log, SegmentBytes: n.cfg.WALSegmentBytes})
	if errors.Is(err, raftstore.ErrLost) || errors.Is(err, raftstore.ErrCorrupt) {
		return ds, n.refuse("it is damaged: %w", err)
	}
	if err != nil {
		return ds, fmt.Errorf("server: open storage: %w", err)
	}
	n.disk = disk
	if ds.hardState, _, err = disk.InitialState(); err != nil {
		return ds, fmt.Errorf("server: storage state: %w", err)
	}
	first, err := disk.FirstIndex()
	if err != nil {
		return ds, fmt.Errorf("server: first index: %w", err)
	}
	if ds.last, err = disk.LastIndex(); err != nil {
		return ds, fmt.Errorf("server: last index: %w", err)
	}
	// The first index is past the snapshot's, and the last at least the
	// snapshot's: the snapshot itself is read once, by node.Start, which
	// restores the state machine from it.
	ds.snapshot = first - 1
	ds.fresh = ds.hardState.IsEmpty() && ds.last == 0
	return ds, n.checkIdentity(ds.fresh, ds.hardState, ds.last)
}

// startTransport starts the TCP transport, delivering to the shell that
// shell will hold. It dials the configured peers; the state machine adds
// the replicated addresses as it restores the snapshot and applies the
// log (peers.go).
func (n *Node) startTransport(shell *atomic.Pointer[node.Node]) error {
	tc := tcp.DefaultConfig()
	tc.ID, tc.Listener, tc.ListenAddr, tc.Meta = n.cfg.ID, n.cfg.PeerListener, n.cfg.Peers[n.cfg.ID], n.cfg.HTTPAddr
	tc.Peers = maps.Clone(n.cfg.Peers)
	tc.Logger = logger(n.cfg.Logger)
	if n.cfg.Security != nil {
		tc.TLS = n.cfg.Security.peerTLS()
	}
	trace := traceEnabled(n.log)
	var firstAppend atomic.Uint64 // the last term whose first append was traced
	tc.Deliver = func(m raft.Message) {
		n.obs.delivered(m, time.Now())
		if trace {
			traceDelivered(n.log, m, &firstAppend)
		}
		if seen := n.handOverSeen.Load(); seen != nil {
			seen.observe(m)
		}
		if m.Type == raft.MsgTimeoutNow {
			n.toldToCampaign.note(m.Term)
		}
		if s := shell.Load(); s != nil {
			s.Deliver(m)
		}
	}
	tc.Unreachable = func(id uint64) {
		if s := shell.Load(); s != nil {
			s.ReportUnreachable(id)
		}
	}
	// A snapshot from the leader is spooled to the data directory as it
	// arrives, and adopted there when installed: no size limit but the
	// disk's, and never held in memory.
	tc.SpoolSnapshot = func(m raft.Message, size int64) (tcp.SnapshotSpool, error) {
		spool, err := n.disk.ReceiveSnapshot(m.Snapshot.Metadata, size)
		if err != nil {
			return nil, err
		}
		return spool, nil
	}
	tc.SnapshotDone = func(id uint64, failed bool) {
		if s := shell.Load(); s != nil {
			s.ReportSnapshot(id, failed)
		}
	}
	tc.PeerClosed = func(id uint64) {
		n.peerCloses.add(id)
		if !n.cfg.PeerCloseHint {
			return
		}
		if s := shell.Load(); s != nil {
			s.ReportPeerGone(id)
		}
	}
	if n.cfg.Metrics != nil {
		tc.Dropped = n.cfg.Metrics.Dropped
	}
	tr, err := tcp.New(tc)
	if err != nil {
		return err
	}
	n.tr = tr
	n.routes = &peerRoutes{self: n.cfg.ID, local: n.cfg.Peers, book: tr}
	n.sm.routes = n.routes
	return nil
}

// shellConfig returns the configuration of the node shell: the raft core's
// (bootstrapping with the configured peers as voters if bootstrap), over
// the storage, transport and state machine opened before.
func (n *Node) shellConfig(bootstrap bool) node.Config {
	nc := node.DefaultConfig()
	nc.Raft.ID, nc.Raft.Rand = n.cfg.ID, rand.New(rand.NewPCG(n.seed(), n.cfg.ID))
	nc.Raft.ElectionTicks, nc.Raft.HeartbeatTicks = n.cfg.ElectionTicks, n.cfg.HeartbeatTicks
	if bootstrap {
		nc.Raft.Peers = slices.Sorted(maps.Keys(n.cfg.Peers))
	}
	nc.Storage = timedStorage{n.disk, n.cfg.Metrics}
	nc.Transport = n.tr
	n.traced(&nc, n.disk)
	nc.StateMachine = n.sm
	nc.TickInterval = n.cfg.TickInterval
	nc.SnapshotEntries = n.cfg.SnapshotEntries
	nc.SnapshotBytes = n.cfg.SnapshotBytes
	nc.SnapshotLogPercent = n.cfg.SnapshotLogPercent
	nc.ConfChanged = n.confChanged
	nc.Logger = n.log
	if n.cfg.Metrics != nil {
		nc.InvalidMessage = n.cfg.Metrics.InvalidMessage
	}
	return nc
}

// seed returns Config.Seed, or one from crypto/rand if it is 0.
func (n *Node) seed() uint64 {
	if n.cfg.Seed != 0 {
		return n.cfg.Seed
	}
	var b [8]byte
	_, _ = crand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// refuse returns the error for a data directory this node must not run
// on, with the way out.
func (n *Node) refuse(format string, args ...any) error {
	return fmt.Errorf("%w: node %d will not start on %s: %w. Nothing in it was changed or removed. "+
		"To recover, replace the node: remove it from the cluster (coord cluster remove %d, or DELETE /v1/members/%d on any node), "+
		"then add it back as a new node with a new ID and an empty data directory (coord cluster add); see docs/storage.md",
		ErrDataDir, n.cfg.ID, n.cfg.DataDir, fmt.Errorf(format, args...), n.cfg.ID, n.cfg.ID)
}

// checkIdentity makes sure the data directory is this node's: it records
// the identity of a new one, and refuses one that holds Raft state but no
// identity (the file was deleted: whatever else was, the node cannot
// tell), or another node's or cluster's.
func (n *Node) checkIdentity(fresh bool, hs raft.HardState, last uint64) error {
	id, ok := n.disk.Identity()
	switch {
	case !ok && !fresh:
		return n.refuse("it holds Raft state (term %d, vote %d, last index %d) but no IDENTITY file, which every data directory gets when its node is created: it was deleted",
			hs.Term, hs.Vote, last)
	case !ok:
		id = raftstore.Identity{ClusterID: n.cfg.ClusterID, NodeID: n.cfg.ID, Created: time.Now()}
		if id.ClusterID == 0 && !n.cfg.Join {
			id.ClusterID = DeriveClusterID(n.cfg.Peers)
		}
		if err := n.disk.SetIdentity(id); err != nil {
			return fmt.Errorf("server: record the data directory's identity: %w", err)
		}
		n.log.Info("new data directory", "dir", n.cfg.DataDir, "identity", id.String())
	case id.NodeID != n.cfg.ID:
		return n.refuse("it belongs to another node (%v)", id)
	case n.cfg.ClusterID != 0 && id.ClusterID != 0 && id.ClusterID != n.cfg.ClusterID:
		return n.refuse("it belongs to another cluster (%v), not cluster %016x", id, n.cfg.ClusterID)
	}
	return nil
}

// DeriveClusterID returns the cluster ID that the initial members of a
// cluster with these peers record when none is given: a hash of the sorted
// peers, the same on every member, never 0.
func DeriveClusterID(peers map[uint64]string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(FormatPeers(peers)))
	return h.Sum64() | 1
}

// watch follows the shell's status: it promotes the lessor when this node
// becomes leader, proposes the Expire commands the lessor asks for while it
// leads (on every tick), and keeps the metrics current. It wakes when the
// role, the leader or the term changes, and on every tick, not at every
// commit: a write moves the status two or three times, and each wake-up
// took the state machine's lock beside the writes being applied.
func (n *Node) watch() {
	defer close(n.watchDone)
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	var lead uint64
	var expiring sync.WaitGroup
	defer expiring.Wait()
	tick := true
	for {
		changed := n.shell.RoleChanged()
		st := n.shell.Status()
		leading := st.Role == raft.Leader && st.Lead == n.cfg.ID
		now := time.Now()
		n.sm.mu.Lock()
		if leading && (!n.sm.leading || n.sm.leaderTerm != st.Term) {
			// Give every held lease its full TTL from now: the old
			// leader's deadlines, and the renewals it answered without
			// a Raft write, are gone, and none may expire early (etcd's
			// lessor Promote does the same). A node that leads again in
			// a later term, even with no other status seen in between,
			// promotes again: another leader may have renewed since.
			n.sm.lessor.promote(n.sm.machine.HeldLeases(), now)
			n.sm.leaderTerm = st.Term
			n.log.Info("became leader", "term", st.Term)
		}
		n.sm.leading = leading
		var expire []Command
		if leading && tick {
			expire = n.sm.lessor.expired(now)
		}
		n.sm.mu.Unlock()
		for _, c := range expire {
			expiring.Add(1)
			go func() {
				defer expiring.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if _, err := n.shell.Propose(ctx, c.Marshal()); err != nil {
					n.log.Debug("propose expire", "lease", c.Key, "err", err)
					n.sm.mu.Lock()
					n.sm.lessor.retrySoon(c.Key)
					n.sm.mu.Unlock()
				}
			}()
		}
		if leading && tick {
			n.bootstrapTokens()
			n.proposeMissingPeers(st.Conf, &expiring)
		}
		if st.Lead != lead {
			if n.cfg.Metrics != nil {
				n.cfg.Metrics.leaderChanges.Inc()
			}
			lead = st.Lead
		}
		n.obs.status(st, n.sm.commands.Load(), now)
		if tick && n.cfg.Metrics != nil {
			n.cfg.Metrics.setState(n.status(st))
			n.cfg.Metrics.setPeers(st, n.obs, now)
		}
		select {
		case <-n.stop:
			return
		case <-n.shell.Done():
			return
		case <-ticker.C:
			tick = true
		case <-changed:
			tick = false
		}
	}
}

// PeerAddr returns the address the Raft transport listens on.
func (n *Node) PeerAddr() string { return n.tr.Addr().String() }

// Done is closed when the node has stopped (Close, or a storage failure).
func (n *Node) Done() <-chan struct{} { return n.shell.Done() }

// Close stops the node: the loop, the transport and the storage. Pending
// proposals and reads fail with ErrStopped.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		close(n.stop)
		err := n.shell.Stop()
		<-n.watchDone
		<-n.feedDone
		if terr := n.tr.Close(); err == nil {
			err = terr
		}
		if derr := n.disk.Close(); err == nil {
			err = derr
		}
		n.closeErr = err
	})
	return n.closeErr
}

// mapErr turns the shell's and the core's errors into the Replica's.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrProposalDropped):
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	case errors.Is(err, node.ErrProposalLost):
		// Another leader's entry took the index: never applied, and it
		// never will be. Safe to pass on.
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	case errors.Is(err, node.ErrOutcomeUnknown):
		return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	case errors.Is(err, node.ErrStorage):
		return fmt.Errorf("%w: %w", ErrStorage, err)
	case errors.Is(err, node.ErrStopped):
		return fmt.Errorf("%w: %v", ErrStopped, err)
	}
	return err
}

// Propose implements Replica. If this node loses leadership while the
// command waits, it returns ErrOutcomeUnknown at once rather than wait for
// the new leader to decide. Whenever it cannot tell whether the command
// was applied (the node stopped, the context ended, leadership was lost)
// the error wraps ErrOutcomeUnknown; ErrNotLeader and ErrStorage mean it
// was not applied.
func (n *Node) Propose(ctx context.Context, cmd Command) (Result, error) {
	if cmd.Op == OpRenew {
		if res, answered, err := n.renewOnLeader(ctx, cmd); answered {
			return res, err
		}
	}
	res, err := n.propose(ctx, cmd)
	return res, proposeOutcome(ctx, err)
}

// proposeOutcome is Propose's error for the error of a proposal's wait.
func proposeOutcome(ctx context.Context, err error) error {
	switch {
	case err == nil, errors.Is(err, ErrOutcomeUnknown), errors.Is(err, ErrNotLeader), errors.Is(err, ErrStorage):
		return err
	case errors.Is(err, ErrStopped), ctx.Err() != nil:
		// The command may have been appended before the node stopped or
		// the caller gave up: it may still commit.
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	return err
}

func (n *Node) propose(ctx context.Context, cmd Command) (Result, error) {
	start := time.Now()
	// The shell answers on done; this goroutine waits for that beside a
	// change of role, without a goroutine of its own per proposal.
	done, err := n.shell.ProposeAsync(ctx, cmd.Marshal())
	if err != nil {
		return Result{}, mapErr(err)
	}
	return n.awaitProposal(ctx, done, start)
}

// awaitProposal waits for the answer to a proposal the shell took at
// start, on done, as a leader's proposal.
func (n *Node) awaitProposal(ctx context.Context, done <-chan node.Result, start time.Time) (Result, error) {
	ran := false
	for {
		// Woken when the role or term changes, not at every commit: at 64
		// clients, every Ready woke every waiting proposer.
		changed := n.shell.RoleChanged()
		if n.shell.Lead() != n.cfg.ID {
			// Refused up front (not leader), the shell answers at once; a
			// proposal appended before leadership was lost waits for the
			// next leader to decide, and is of unknown outcome until then.
			// The leader is read before waiting on changed, so a loss
			// between the append and the first read is seen here too.
			// The shell took the proposal but may not have run it yet:
			// once it has, a refusal is on done before the tick starts.
			if !ran {
				ran = true
				_ = n.shell.Barrier(ctx) // on an error (ctx ended, the shell stopped) the select decides
			}
			select {
			case r := <-done:
				return proposeAnswer(r)
			case <-time.After(n.cfg.TickInterval):
				return Result{}, ErrOutcomeUnknown
			case <-ctx.Done():
				return Result{}, ctx.Err()
			}
		}
		select {
		case r := <-done:
			if r.Err == nil && n.cfg.Metrics != nil {
				n.cfg.Metrics.proposeSeconds.Observe(time.Since(start).Seconds())
			}
			return proposeAnswer(r)
		case <-changed:
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}
}

// proposeAnswer turns the shell's answer to a proposal into the Replica's.
func proposeAnswer(r node.Result) (Result, error) {
	res, _ := r.Value.(Result)
	return res, mapErr(r.Err)
}

// renewOnLeader answers a renewal without a Raft write, as etcd's lessor
// does: the leader confirms with a quorum that it still leads (a ReadIndex
// round started after the request arrived, which also applies everything
// committed before it; renewals share rounds, at most one every
// renewRoundInterval), checks the API token the renewal carries, if any,
// and the holder and lease token against its state, and
// moves its own deadline to now plus the TTL. The package doc ("Lease expiry") says
// why this is safe. It answers (answered false) nothing it cannot answer
// that way: a renewal that changes the TTL, one on a node that does not
// lead (or whose lessor is not promoted yet), and one whose deadline passed
// or whose Expire is in flight go through the log as before.
func (n *Node) renewOnLeader(ctx context.Context, c Command) (res Result, answered bool, err error) {
	if st := n.shell.Status(); st.Role != raft.Leader {
		return Result{}, false, nil
	}
	if err := mapErr(n.renewals.wait(ctx)); err != nil {
		if errors.Is(err, ErrNotLeader) {
			return Result{}, false, nil
		}
		// Nothing was written: the renewal did not happen.
		return Result{}, true, err
	}
	now := time.Now()
	n.sm.mu.Lock()
	defer n.sm.mu.Unlock()
	if !n.sm.leading || n.sm.machine.check(c) != "" {
		return Result{}, false, nil
	}
	// A renewal this node took while it did not lead (it waited for an
	// election this node won: API.propose) carries its token's hash: the
	// token was checked against the tokens applied then, which may lag a
	// revocation committed since. Check it again against the state this
	// answer is made from, as Apply checks a write at its entry.
	if res, ok := n.sm.machine.authorize(c); !ok {
		return res, true, nil
	}
	l := n.sm.machine.Lease(c.Key)
	if !l.Held() || l.Holder != c.Holder || l.Token != c.Token {
		// Final: tokens only grow, and a freed tenure never returns.
		return leaseResult(StatusLost, l), true, nil
	}
	if (c.TTL != 0 && c.TTL != l.TTL) || !n.sm.lessor.extend(l, now) {
		return Result{}, false, nil
	}
	if n.cfg.Metrics != nil {
		n.cfg.Metrics.leaseRenewalsLocal.Inc()
	}
	return leaseResult(StatusOK, l), true, nil
}

// ReadBarrier implements Replica with the core's ReadIndex. Concurrent
// callers share rounds (readRounds).
func (n *Node) ReadBarrier(ctx context.Context) error {
	return mapErr(n.reads.wait(ctx))
}

// readRounds coalesces ReadIndex requests, as etcd's linearizable read
// loop does: callers that arrive while a round is in flight all wait for
// the next one, which starts when the current one ends (and, with minGap,
// no sooner than minGap after the current one started). A caller is only
// ever answered by a round that started after it arrived, so it gets the
// guarantee of a ReadIndex of its own (dissertation §6.4), while the
// leader sends a heartbeat round per round trip (or per minGap) rather
// than per request.
//
// Linearizable reads use rounds without a gap (Node.reads): their latency
// is the client's. Lease renewals use rounds at most every
// renewRoundInterval (Node.renewals): a renewal's latency hardly matters
// against a TTL of seconds, and every round is a heartbeat each follower
// must receive and answer, so the gap bounds what renewals cost the
// followers however many arrive (the package doc, "Lease expiry").
//
// readRounds is safe for concurrent use.
type readRounds struct {
	readIndex func(context.Context) error
	// minGap is the least time from the start of one round to the start
	// of the next; zero starts the next as soon as the last one ends.
	minGap  time.Duration
	mu      sync.Mutex
	pending *readRound // the round callers arriving now will share
	running bool       // a goroutine runs rounds
	// lastStart is when the last round started, kept across runs of the
	// goroutine so that the gap holds when it ends and starts again.
	lastStart time.Time
}

type readRound struct {
	done    chan struct{}
	err     error
	callers int // callers waiting for it; for tests
}

// readRoundTimeout bounds one round; a caller's own context may end it
// sooner for that caller.
const readRoundTimeout = 10 * time.Second

// renewRoundInterval is the least time between two rounds that confirm
// lease renewals. At 10 ms a follower answers at most 100 such heartbeats a
// second, whatever the renewal rate (at 3,333 renewals a second the rounds
// had followed each other every few milliseconds), and a renewal waits at
// most 10 ms more than a round trip. 20 ms cost the followers a little less
// (2.3% of a core against 3.4% in one run) but held back a client that
// renews its leases one after another below 3,333 renewals a second
// (docs/BENCHMARKS.md, issue 21).
const renewRoundInterval = 10 * time.Millisecond

func (r *readRounds) wait(ctx context.Context) error {
	r.mu.Lock()
	if r.pending == nil {
		r.pending = &readRound{done: make(chan struct{})}
	}
	round := r.pending
	round.callers++
	if !r.running {
		r.running = true
		go r.run()
	}
	r.mu.Unlock()
	select {
	case <-round.done:
		if err := ctx.Err(); err != nil {
			return err // both were ready: the caller's end is what it hears
		}
		return round.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run runs rounds while callers wait for one. It takes the pending round
// only once the gap has passed, so that callers arriving during the gap
// share it, and it started after every one of them arrived.
func (r *readRounds) run() {
	for {
		r.mu.Lock()
		if r.pending == nil {
			r.running = false
			r.mu.Unlock()
			return
		}
		wait := r.minGap - time.Since(r.lastStart)
		r.mu.Unlock()
		if wait > 0 {
			time.Sleep(wait)
		}
		r.mu.Lock()
		round := r.pending
		r.pending = nil
		r.lastStart = time.Now()
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), readRoundTimeout)
		round.err = r.readIndex(ctx)
		cancel()
		close(round.done)
	}
}

type nodeView struct{ s *stateMachine }

func (v nodeView) Get(key string) (KeyValue, bool) { return v.s.machine.Get(key) }
func (v nodeView) Lease(name string) Lease         { return v.s.machine.Lease(name) }
func (v nodeView) Token(hash [TokenHashBytes]byte) (Token, bool) {
	return v.s.machine.TokenByHash(hash)
}
func (v nodeView) Tokens() []Token { return v.s.machine.Tokens() }
func (v nodeView) Remaining(name string) (time.Duration, bool) {
	left, ok := v.s.lessor.remaining(name, time.Now())
	return left, ok && v.s.leading
}

// View implements Replica.
func (n *Node) View(fn func(View)) {
	n.sm.mu.RLock()
	defer n.sm.mu.RUnlock()
	fn(nodeView{n.sm})
}

// Changed implements Replica.
func (n *Node) Changed() <-chan struct{} {
	n.sm.mu.Lock()
	defer n.sm.mu.Unlock()
	n.sm.changedTaken = true
	return n.sm.changed
}

// ChangedOf implements Replica.
// The index has its own lock: a watch waiting again does not take the
// state machine's, which every apply needs.
func (n *Node) ChangedOf(w Watched) <-chan struct{} {
	return n.sm.watches.wait(w)
}

// Status implements Replica.
func (n *Node) Status() api.NodeStatus { return n.status(n.shell.Status()) }

// Leader implements Replica from the shell's status alone: no lock of the
// state machine, no member list.
func (n *Node) Leader() (self, leader uint64) { return n.cfg.ID, n.shell.Lead() }

// StatusChanged returns a channel that is closed when the node's Raft
// status (role, term, leader, commit, applied index) next changes. Take it
// before reading Status, so that no change falls in between.
func (n *Node) StatusChanged() <-chan struct{} { return n.shell.Changed() }

func (n *Node) status(st raft.Status) api.NodeStatus {
	out := api.NodeStatus{ID: n.cfg.ID, Term: st.Term, Leader: st.Lead, Commit: st.Commit, Applied: st.Applied}
	if id, ok := n.disk.Identity(); ok && id.ClusterID != 0 {
		out.ClusterID = fmt.Sprintf("%016x", id.ClusterID)
	}
	if err := n.shell.StorageError(); err != nil {
		out.Storage = &api.StorageStatus{Error: err.Error(), DiskFull: vfs.IsNoSpace(err)}
	}
	if lost := st.LogLost; lost != nil {
		out.LogLost = &api.LogLostStatus{Leader: lost.Leader, Commit: lost.Commit, LastIndex: lost.LastIndex}
	}
	switch {
	case !st.Conf.IsVoter(n.cfg.ID) && st.Conf.IsLearner(n.cfg.ID):
		out.Role = api.RoleLearner
	case st.Role == raft.Leader:
		out.Role = api.RoleLeader
	case st.Role == raft.Candidate || st.Role == raft.PreCandidate:
		out.Role = api.RoleCandidate
	default:
		out.Role = api.RoleFollower
	}
	n.sm.mu.RLock()
	peers := n.sm.machine.Peers()
	n.sm.mu.RUnlock()
	add := func(id uint64, voter bool) {
		m := api.Member{ID: id, Peer: peers[id], Voter: voter}
		if m.Peer == "" {
			m.Peer = n.cfg.Peers[id]
		}
		if id == n.cfg.ID {
			m.HTTP = n.cfg.HTTPAddr
		} else {
			m.HTTP, _ = n.tr.PeerMeta(id)
		}
		out.Members = append(out.Members, m)
	}
	for _, id := range st.Conf.Voters {
		add(id, true)
	}
	for _, id := range st.Conf.Learners {
		add(id, false)
	}
	sort.Slice(out.Members, func(i, j int) bool { return out.Members[i].ID < out.Members[j].ID })
	return out
}

// changeMembership proposes cc until it applies, waiting while another
// change is pending or a new voter catches up.
func (n *Node) changeMembership(ctx context.Context, cc raft.ConfChange) error {
	for {
		_, err := n.shell.ProposeConfChange(ctx, cc)
		switch {
		case errors.Is(err, raft.ErrConfChangePending), errors.Is(err, raft.ErrNotCaughtUp):
			select {
			case <-time.After(n.cfg.TickInterval):
				continue
			case <-ctx.Done():
				return fmt.Errorf("server: membership change: %w (last: %v)", ctx.Err(), err)
			}
		case errors.Is(err, raft.ErrInvalidConfChange):
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		return mapErr(err)
	}
}

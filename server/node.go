package server

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"sync"
	"time"

	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/vfs"
	"coord/transport/tcp"
)

// ErrOutcomeUnknown means a write was appended to the leader's log but the
// node lost leadership before it could tell whether the write committed.
// A client with a session may retry it safely; the API answers 503.
var ErrOutcomeUnknown = errors.New("server: outcome unknown (leadership lost)")

// Config configures a Node. Start from DefaultConfig.
type Config struct {
	// ID is this node's ID; never 0.
	ID uint64
	// Peers maps the initial voters' IDs, this node's included, to their
	// Raft transport addresses. A brand-new node of a new cluster
	// bootstraps with them as its voters.
	Peers map[uint64]string
	// Join says this node joins an existing cluster (it was added with
	// AddMember): it does not bootstrap, and waits for the leader.
	Join bool
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
	// Limits bounds commands and the state machine.
	Limits Limits
	// Seed seeds the election timeouts; 0 draws one at random.
	Seed uint64

	// Logger logs the node's life. Nil: slog.Default().
	Logger *slog.Logger
	// Metrics, if set, is updated as the node runs.
	Metrics *Metrics
}

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
		Limits:          DefaultLimits(),
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
	}
	for id, addr := range c.Peers {
		if id == 0 || addr == "" {
			return fmt.Errorf("%w: peer %d at %q", ErrInvalid, id, addr)
		}
	}
	return nil
}

// Node is one member of a coord cluster: the Raft core, its durable
// storage, the TCP transport and the state machine, driven by one
// goroutine that owns the core (STYLE rule 3). It implements Replica.
//
// Node is safe for concurrent use: other goroutines talk to the loop by
// message, and read the state machine under a read lock.
type Node struct {
	cfg  Config
	log  *slog.Logger
	disk *raftstore.Disk
	tr   *tcp.Transport

	// Owned by the loop goroutine.
	core        *raft.Core
	waiters     map[uint64]waiter // by log index
	readWaiters map[uint64]chan error
	readQueue   []pendingRead
	nextRead    uint64
	appliedConf raft.ConfState
	snapIndex   uint64
	lead        uint64

	// Channels into the loop.
	recv        chan raft.Message
	proposals   chan proposal
	reads       chan chan error
	unreachable chan uint64
	snapDone    chan snapReport
	stop        chan struct{}
	stopped     chan struct{}
	closeOnce   sync.Once

	// Guarded by mu: what other goroutines read.
	mu      sync.RWMutex
	machine *Machine
	lessor  *lessor
	status  NodeStatus
	changed chan struct{}
}

type waiter struct {
	term uint64
	done chan proposeResult
}

type proposeResult struct {
	res Result
	err error
}

type proposal struct {
	data []byte
	conf *raft.ConfChange
	done chan proposeResult
}

type pendingRead struct {
	index uint64
	done  chan error
}

type snapReport struct {
	id     uint64
	failed bool
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
	n := &Node{
		cfg: cfg, log: logger(cfg.Logger).With("node", cfg.ID),
		waiters: map[uint64]waiter{}, readWaiters: map[uint64]chan error{},
		recv:        make(chan raft.Message, 4096),
		proposals:   make(chan proposal, 1024),
		reads:       make(chan chan error, 1024),
		unreachable: make(chan uint64, 256),
		snapDone:    make(chan snapReport, 16),
		stop:        make(chan struct{}),
		stopped:     make(chan struct{}),
		machine:     NewMachine(cfg.Limits),
		lessor:      newLessor(time.Second),
		changed:     make(chan struct{}),
	}
	if err := n.open(); err != nil {
		if n.disk != nil {
			n.disk.Close()
		}
		return nil, err
	}
	go n.run()
	return n, nil
}

func (n *Node) open() error {
	disk, err := raftstore.Open(n.cfg.FS, n.cfg.DataDir, raftstore.Options{Logger: n.log})
	if err != nil {
		return fmt.Errorf("server: open storage: %w", err)
	}
	n.disk = disk
	hs, cs, err := disk.InitialState()
	if err != nil {
		return fmt.Errorf("server: storage state: %w", err)
	}
	snap, err := disk.Snapshot()
	if err != nil {
		return fmt.Errorf("server: read snapshot: %w", err)
	}
	if !snap.IsEmpty() {
		if err := n.machine.Restore(snap.Data); err != nil {
			return fmt.Errorf("server: restore snapshot at %d: %w", snap.Metadata.Index, err)
		}
		n.snapIndex = snap.Metadata.Index
	}
	n.appliedConf = cs
	last, err := disk.LastIndex()
	if err != nil {
		return err
	}
	seed := n.cfg.Seed
	if seed == 0 {
		var b [8]byte
		_, _ = crand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	rc := raft.DefaultConfig()
	rc.ID, rc.Storage, rc.Rand = n.cfg.ID, disk, rand.New(rand.NewPCG(seed, n.cfg.ID))
	rc.ElectionTicks, rc.HeartbeatTicks = n.cfg.ElectionTicks, n.cfg.HeartbeatTicks
	rc.Applied = n.machine.Applied()
	fresh := hs.IsEmpty() && last == 0 && snap.IsEmpty()
	if fresh && !n.cfg.Join {
		for id := range n.cfg.Peers {
			rc.Peers = append(rc.Peers, id)
		}
		slices.Sort(rc.Peers)
	}
	core, err := raft.New(rc)
	if err != nil {
		return fmt.Errorf("server: raft: %w", err)
	}
	n.core = core

	// Peers: the initial ones from the configuration, then those the
	// membership changes recorded (they win: they are newer).
	peers := map[uint64]string{}
	for id, addr := range n.cfg.Peers {
		peers[id] = addr
	}
	for id, addr := range n.machine.Peers() {
		peers[id] = addr
	}
	tc := tcp.DefaultConfig()
	tc.ID, tc.Listener, tc.ListenAddr, tc.Peers, tc.Meta = n.cfg.ID, n.cfg.PeerListener, n.cfg.Peers[n.cfg.ID], peers, n.cfg.HTTPAddr
	tc.Logger = logger(n.cfg.Logger)
	tc.Deliver = n.deliver
	tc.Unreachable = func(id uint64) {
		select {
		case n.unreachable <- id:
		default:
		}
	}
	tc.SnapshotDone = func(id uint64, failed bool) {
		select {
		case n.snapDone <- snapReport{id, failed}:
		default:
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
	n.status = NodeStatus{ID: n.cfg.ID, Role: RoleFollower, Term: hs.Term, Commit: hs.Commit, Applied: n.machine.Applied()}
	n.refreshMembers()
	n.log.Info("node started", "term", hs.Term, "commit", hs.Commit, "applied", n.machine.Applied(),
		"snapshot", n.snapIndex, "last_index", last, "bootstrap", len(rc.Peers) > 0)
	return nil
}

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}

// deliver is the transport's hand-off: it never blocks. A full inbox drops
// the message, as an overloaded network would.
func (n *Node) deliver(m raft.Message) {
	select {
	case n.recv <- m:
	default:
		if n.cfg.Metrics != nil {
			n.cfg.Metrics.Dropped("inbox full")
		}
	}
}

// PeerAddr returns the address the Raft transport listens on.
func (n *Node) PeerAddr() string { return n.tr.Addr().String() }

// Close stops the node: the loop, the transport and the storage. Pending
// proposals and reads fail with ErrStopped.
func (n *Node) Close() error {
	n.closeOnce.Do(func() { close(n.stop) })
	<-n.stopped
	err := n.tr.Close()
	if derr := n.disk.Close(); err == nil {
		err = derr
	}
	return err
}

// run is the node's loop: the only goroutine that touches the core.
func (n *Node) run() {
	defer close(n.stopped)
	defer n.failAll(ErrStopped)
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-ticker.C:
			n.core.Tick()
			n.expireLeases()
		case m := <-n.recv:
			if err := n.core.Step(m); err != nil {
				n.log.Debug("step", "msg", m.String(), "err", err)
			}
		case p := <-n.proposals:
			n.propose(p)
		case done := <-n.reads:
			n.nextRead++
			if err := n.core.ReadIndex(n.nextRead); err != nil {
				done <- ErrNotLeader
			} else {
				n.readWaiters[n.nextRead] = done
			}
		case id := <-n.unreachable:
			n.core.ReportUnreachable(id)
		case s := <-n.snapDone:
			n.core.ReportSnapshot(s.id, s.failed)
		}
		n.drain()
		for n.core.HasReady() {
			if err := n.handleReady(); err != nil {
				// The disk failed: a node that cannot persist must not
				// answer anyone (its promises would be empty). Stop.
				n.log.Error("storage failed; stopping the node", "err", err)
				return
			}
		}
	}
}

// drainMax bounds the queued events taken in one batch, so that ticks are
// not starved.
const drainMax = 512

// drain takes whatever else is queued (proposals, messages, reads) without
// waiting, so that one Ready, and one fsync, covers all of it: proposals
// that arrived during the last fsync are batched into the next.
func (n *Node) drain() {
	for range drainMax {
		select {
		case m := <-n.recv:
			if err := n.core.Step(m); err != nil {
				n.log.Debug("step", "msg", m.String(), "err", err)
			}
		case p := <-n.proposals:
			n.propose(p)
		case done := <-n.reads:
			n.nextRead++
			if err := n.core.ReadIndex(n.nextRead); err != nil {
				done <- ErrNotLeader
			} else {
				n.readWaiters[n.nextRead] = done
			}
		default:
			return
		}
	}
}

func (n *Node) propose(p proposal) {
	var index, term uint64
	var err error
	if p.conf != nil {
		index, term, err = n.core.ProposeConfChange(*p.conf)
	} else {
		index, term, err = n.core.Propose(p.data)
	}
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrProposalDropped):
		p.done <- proposeResult{err: fmt.Errorf("%w: %v", ErrNotLeader, err)}
	case err != nil:
		p.done <- proposeResult{err: err}
	default:
		n.waiters[index] = waiter{term: term, done: p.done}
	}
}

// expireLeases proposes the Expire commands the leader's lessor asks for.
func (n *Node) expireLeases() {
	if n.lead != n.cfg.ID {
		return
	}
	n.mu.Lock()
	cmds := n.lessor.expired(time.Now())
	n.mu.Unlock()
	for _, c := range cmds {
		if _, _, err := n.core.Propose(c.Marshal()); err != nil {
			n.log.Debug("propose expire", "lease", c.Key, "err", err)
		}
	}
}

// handleReady does one Ready's work in the order raft.Ready prescribes.
func (n *Node) handleReady() error {
	rd := n.core.Ready()
	if rd.SoftState != nil {
		n.softStateChanged(*rd.SoftState)
	}
	start := time.Now()
	if !rd.Snapshot.IsEmpty() {
		if err := n.disk.ApplySnapshot(rd.Snapshot); err != nil {
			return fmt.Errorf("apply snapshot: %w", err)
		}
	}
	if !rd.HardState.IsEmpty() || len(rd.Entries) > 0 {
		if err := n.disk.Save(rd.HardState, rd.Entries); err != nil {
			return fmt.Errorf("save: %w", err)
		}
		if n.cfg.Metrics != nil && rd.MustSync {
			n.cfg.Metrics.appendSeconds.Observe(time.Since(start).Seconds())
		}
	}
	// Only now: the messages may promise what was just made durable.
	n.tr.Send(rd.Messages)
	if !rd.Snapshot.IsEmpty() {
		if err := n.installSnapshot(rd.Snapshot); err != nil {
			return err
		}
	}
	n.apply(rd.CommittedEntries)
	for _, rs := range rd.ReadStates {
		if done, ok := n.readWaiters[rs.ID]; ok {
			delete(n.readWaiters, rs.ID)
			n.readQueue = append(n.readQueue, pendingRead{index: rs.Index, done: done})
		}
	}
	n.releaseReads()
	if !rd.HardState.IsEmpty() {
		n.mu.Lock()
		n.status.Term, n.status.Commit = rd.HardState.Term, rd.HardState.Commit
		n.mu.Unlock()
	}
	n.core.Advance(rd)
	n.updateMetrics()
	return n.maybeCompact()
}

func (n *Node) softStateChanged(s raft.SoftState) {
	if s.Lead != n.lead && n.cfg.Metrics != nil {
		n.cfg.Metrics.leaderChanges.Inc()
	}
	wasLeader := n.lead == n.cfg.ID
	n.lead = s.Lead
	n.mu.Lock()
	n.status.Leader = s.Lead
	n.status.Role = n.role(s.Role)
	if s.Role == raft.Leader && !wasLeader {
		// Give every held lease its full TTL from now: the old leader's
		// deadlines are gone, and none may expire early (etcd's Promote).
		n.lessor.promote(n.machine.HeldLeases(), time.Now())
	}
	n.mu.Unlock()
	if s.Role != raft.Leader && wasLeader {
		n.log.Info("lost leadership", "leader", s.Lead)
		for idx, w := range n.waiters {
			w.done <- proposeResult{err: ErrOutcomeUnknown}
			delete(n.waiters, idx)
		}
		for id, done := range n.readWaiters {
			done <- ErrNotLeader
			delete(n.readWaiters, id)
		}
		for _, r := range n.readQueue {
			r.done <- ErrNotLeader
		}
		n.readQueue = nil
	}
	if s.Role == raft.Leader {
		n.log.Info("became leader", "term", n.core.Status().Term)
	}
}

func (n *Node) role(r raft.Role) Role {
	switch {
	case !n.appliedConf.IsVoter(n.cfg.ID) && n.appliedConf.IsLearner(n.cfg.ID):
		return RoleLearner
	case r == raft.Leader:
		return RoleLeader
	case r == raft.Candidate || r == raft.PreCandidate:
		return RoleCandidate
	default:
		return RoleFollower
	}
}

func (n *Node) installSnapshot(s raft.Snapshot) error {
	n.mu.Lock()
	err := n.machine.Restore(s.Data)
	if err == nil {
		n.lessor.reset(n.machine.HeldLeases(), time.Now())
		n.status.Applied = n.machine.Applied()
	}
	n.mu.Unlock()
	if err != nil {
		return fmt.Errorf("restore snapshot at %d: %w", s.Metadata.Index, err)
	}
	n.snapIndex = s.Metadata.Index
	n.appliedConf = s.Metadata.ConfState
	for id, addr := range n.machine.Peers() {
		n.tr.AddPeer(id, addr)
	}
	n.refreshMembers()
	n.notifyChanged()
	return nil
}

// apply applies committed entries to the state machine and answers the
// proposals waiting for them.
func (n *Node) apply(entries []raft.Entry) {
	if len(entries) == 0 {
		return
	}
	now := time.Now()
	type answer struct {
		w   waiter
		res proposeResult
	}
	var answers []answer
	confChanged := false
	n.mu.Lock()
	for _, e := range entries {
		if e.Index <= n.machine.Applied() {
			continue // already in the restored snapshot
		}
		var res Result
		switch e.Type {
		case raft.EntryConfChange:
			res = n.applyConfChange(e)
			confChanged = true
		default:
			res = n.applyCommand(e, now)
		}
		if w, ok := n.waiters[e.Index]; ok {
			delete(n.waiters, e.Index)
			pr := proposeResult{res: res}
			if w.term != e.Term {
				// Another leader's entry took the index: ours was never
				// committed, and never will be.
				pr = proposeResult{err: ErrNotLeader}
			}
			answers = append(answers, answer{w, pr})
		}
	}
	n.status.Applied = n.machine.Applied()
	n.mu.Unlock()
	for _, a := range answers {
		a.w.done <- a.res
	}
	if confChanged {
		n.refreshMembers()
	}
	n.notifyChanged()
}

// applyCommand applies one normal entry; n.mu is held.
func (n *Node) applyCommand(e raft.Entry, now time.Time) Result {
	if len(e.Data) == 0 {
		n.machine.Advance(e.Index)
		return Result{}
	}
	cmd, err := UnmarshalCommand(e.Data)
	if err != nil {
		n.machine.Advance(e.Index)
		return Result{Status: StatusInvalid, Reason: err.Error()}
	}
	res := n.machine.ApplyCommand(e.Index, cmd)
	switch cmd.Op {
	case OpAcquire, OpRenew, OpRelease, OpExpire:
		n.lessor.observe(n.machine.Lease(cmd.Key), now)
	}
	return res
}

// applyConfChange applies one membership change entry; n.mu is held.
func (n *Node) applyConfChange(e raft.Entry) Result {
	cc, err := raft.UnmarshalConfChange(e.Data)
	if err != nil {
		n.machine.Advance(e.Index)
		return Result{Status: StatusInvalid, Reason: err.Error()}
	}
	next, err := raft.ApplyConfChange(n.appliedConf, cc)
	if err != nil {
		// The core refuses such changes before they reach the log; one
		// that got there anyway is applied by nobody.
		n.machine.Advance(e.Index)
		return Result{Status: StatusInvalid, Reason: err.Error()}
	}
	n.appliedConf = next
	// The context carries the address of the node that joins.
	joined, left := map[uint64]string{}, []uint64(nil)
	for _, c := range cc.Changes {
		if c.Type == raft.ConfChangeRemove {
			left = append(left, c.NodeID)
		} else {
			joined[c.NodeID] = string(cc.Context)
		}
	}
	n.machine.ApplyMembership(e.Index, joined, left)
	for id, addr := range joined {
		if id != n.cfg.ID && addr != "" {
			n.tr.AddPeer(id, addr)
		}
	}
	for _, id := range left {
		if id != n.cfg.ID {
			n.tr.RemovePeer(id)
		}
	}
	return Result{Revision: e.Index}
}

func (n *Node) notifyChanged() {
	n.mu.Lock()
	close(n.changed)
	n.changed = make(chan struct{})
	n.mu.Unlock()
}

// releaseReads answers the confirmed reads whose index is applied.
func (n *Node) releaseReads() {
	applied := n.machine.Applied() // only the loop writes it
	kept := n.readQueue[:0]
	for _, r := range n.readQueue {
		if r.index <= applied {
			r.done <- nil
		} else {
			kept = append(kept, r)
		}
	}
	n.readQueue = kept
}

// maybeCompact snapshots the state machine and compacts the log every
// SnapshotEntries applied entries.
func (n *Node) maybeCompact() error {
	applied := n.machine.Applied()
	if applied < n.snapIndex+n.cfg.SnapshotEntries {
		return nil
	}
	n.mu.RLock()
	data := n.machine.Snapshot()
	n.mu.RUnlock()
	if err := n.disk.Compact(applied, data, n.appliedConf); err != nil {
		if errors.Is(err, raft.ErrSnapshotOutOfDate) {
			return nil
		}
		return fmt.Errorf("compact at %d: %w", applied, err)
	}
	n.log.Debug("compacted", "index", applied, "snapshot_bytes", len(data))
	n.snapIndex = applied
	return nil
}

func (n *Node) failAll(err error) {
	for idx, w := range n.waiters {
		w.done <- proposeResult{err: err}
		delete(n.waiters, idx)
	}
	for id, done := range n.readWaiters {
		done <- err
		delete(n.readWaiters, id)
	}
	for _, r := range n.readQueue {
		r.done <- err
	}
	n.readQueue = nil
}

// refreshMembers rebuilds the status's member list from the applied
// membership; only the loop (and open) call it.
func (n *Node) refreshMembers() {
	peers := n.machine.Peers()
	var members []Member
	add := func(id uint64, voter bool) {
		addr := peers[id]
		if addr == "" {
			addr = n.cfg.Peers[id]
		}
		members = append(members, Member{ID: id, Peer: addr, Voter: voter})
	}
	for _, id := range n.appliedConf.Voters {
		add(id, true)
	}
	for _, id := range n.appliedConf.Learners {
		add(id, false)
	}
	sort.Slice(members, func(i, j int) bool { return members[i].ID < members[j].ID })
	n.mu.Lock()
	n.status.Members = members
	n.mu.Unlock()
}

func (n *Node) updateMetrics() {
	if n.cfg.Metrics == nil {
		return
	}
	n.cfg.Metrics.setState(n.Status())
}

// Propose implements Replica.
func (n *Node) Propose(ctx context.Context, cmd Command) (Result, error) {
	start := time.Now()
	r, err := n.submit(ctx, proposal{data: cmd.Marshal()})
	if err == nil && n.cfg.Metrics != nil {
		n.cfg.Metrics.proposeSecond.Observe(time.Since(start).Seconds())
	}
	return r, err
}

func (n *Node) submit(ctx context.Context, p proposal) (Result, error) {
	p.done = make(chan proposeResult, 1)
	select {
	case n.proposals <- p:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-n.stopped:
		return Result{}, ErrStopped
	}
	select {
	case r := <-p.done:
		return r.res, r.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-n.stopped:
		return Result{}, ErrStopped
	}
}

// ReadBarrier implements Replica with the core's ReadIndex.
func (n *Node) ReadBarrier(ctx context.Context) error {
	done := make(chan error, 1)
	select {
	case n.reads <- done:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopped:
		return ErrStopped
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopped:
		return ErrStopped
	}
}

type nodeView struct{ n *Node }

func (v nodeView) Get(key string) (KeyValue, bool) { return v.n.machine.Get(key) }
func (v nodeView) Lease(name string) Lease         { return v.n.machine.Lease(name) }
func (v nodeView) Remaining(name string) (time.Duration, bool) {
	left, ok := v.n.lessor.remaining(name, time.Now())
	return left, ok && v.n.status.Leader == v.n.cfg.ID
}

// View implements Replica.
func (n *Node) View(fn func(View)) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	fn(nodeView{n})
}

// Changed implements Replica.
func (n *Node) Changed() <-chan struct{} {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.changed
}

// Status implements Replica.
func (n *Node) Status() NodeStatus {
	n.mu.RLock()
	st := n.status
	st.Members = slices.Clone(st.Members)
	n.mu.RUnlock()
	for i := range st.Members {
		m := &st.Members[i]
		if m.ID == n.cfg.ID {
			m.HTTP = n.cfg.HTTPAddr
		} else {
			m.HTTP, _ = n.tr.PeerMeta(m.ID)
		}
	}
	return st
}

// AddMember implements Replica: the node joins as a learner, and is
// promoted to voter once it has caught up (dissertation §4.2.1).
func (n *Node) AddMember(ctx context.Context, id uint64, peer string) error {
	if id == 0 || peer == "" {
		return fmt.Errorf("%w: member id and address are required", ErrInvalid)
	}
	learner := raft.ConfChange{Changes: []raft.ConfChangeSingle{{Type: raft.ConfChangeAddLearner, NodeID: id}}, Context: []byte(peer)}
	if err := n.changeMembership(ctx, learner); err != nil {
		return err
	}
	voter := raft.ConfChange{Changes: []raft.ConfChangeSingle{{Type: raft.ConfChangeAddVoter, NodeID: id}}, Context: []byte(peer)}
	return n.changeMembership(ctx, voter)
}

// RemoveMember implements Replica.
func (n *Node) RemoveMember(ctx context.Context, id uint64) error {
	cc := raft.ConfChange{Changes: []raft.ConfChangeSingle{{Type: raft.ConfChangeRemove, NodeID: id}}}
	return n.changeMembership(ctx, cc)
}

// changeMembership proposes cc until it applies, waiting while another
// change is pending or a new voter catches up.
func (n *Node) changeMembership(ctx context.Context, cc raft.ConfChange) error {
	for {
		res, err := n.submit(ctx, proposal{conf: &cc})
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
		case err != nil:
			return err
		case res.Status == StatusInvalid:
			return fmt.Errorf("%w: %s", ErrInvalid, res.Reason)
		}
		return nil
	}
}

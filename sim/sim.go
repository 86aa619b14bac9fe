package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"time"

	"coord/internal/assert"
	shell "coord/node"
	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/vfs"
)

// maxQueuedPerNode bounds the messages in flight to one node; past it the
// network drops, like a full switch buffer. It never blocks the sender.
const maxQueuedPerNode = 2048

// Stats counts what happened in a run.
type Stats struct {
	Steps           int           // events processed
	SimulatedTime   time.Duration // simulated time covered
	Delivered       int           // messages delivered
	Dropped         int           // messages lost to faults, partitions, crashes, full queues
	Leaders         int           // times a node became leader
	Crashes         int
	Partitions      int
	ConfChanges     int // membership changes proposed and accepted
	JointChanges    int // of which through joint consensus
	Transfers       int // leadership transfers started
	Snapshots       int // snapshots created
	Writes          int // client writes accepted by a leader
	AckedWrites     int // client writes applied and acknowledged
	Reads           int // ReadIndex reads confirmed
	MaxQueuedToNode int // the most messages ever in flight to one node
	DiskFulls       int // times a node's disk filled up
	StuckReadies    int // Readies held because the disk was full, then written
	LostDirs        int // data directories lost (and restarts refused)
}

// Result is the outcome of one run.
type Result struct {
	Config Config
	Stats  Stats
	// Err is nil if every check passed; otherwise a *Violation.
	Err error
}

// ErrViolation is matched by every *Violation (errors.Is).
var ErrViolation = errors.New("sim: invariant violated")

// Violation is a failed check, with what is needed to replay it.
type Violation struct {
	Seed   uint64
	At     time.Duration // simulated time of the failing step
	Check  string        // which property failed
	Detail string
	Replay string // the command that replays the run
	// TestReplay is the go test command that replays the run, for runs
	// of the test sweep.
	TestReplay string
}

// Error says which check failed, when, and how to replay the run.
func (v *Violation) Error() string {
	return fmt.Sprintf("sim: seed %d at %v: %s: %s\nreplay: %s\n    or: %s",
		v.Seed, v.At, v.Check, v.Detail, v.Replay, v.TestReplay)
}

// Is makes errors.Is(err, ErrViolation) true.
func (v *Violation) Is(target error) bool { return target == ErrViolation }

// Sim is one simulated cluster. It is not safe for concurrent use; run
// independent seeds on independent Sims.
type Sim struct {
	cfg    Config
	rng    *rand.Rand
	now    int64 // microseconds
	seq    uint64
	events eventQueue
	nodes  map[uint64]*node
	ids    []uint64 // every node ever started, ascending
	nextID uint64
	cut    map[[2]uint64]bool
	queued map[uint64]int
	chaos  bool
	check  checker
	stats  Stats
	trace  io.Writer

	writeSeq     uint64
	readSeq      uint64
	acked        []ackedWrite
	maxAcked     uint64
	healedAt     int64
	livenessMet  bool
	convergedAt  int64
	failure      *Violation
	livenessDone bool
}

type node struct {
	id          uint64
	core        *raft.Core // nil while down
	storage     shell.Storage
	fs          *vfs.MemFS   // the disk under storage, with Config.Disk
	fault       *vfs.FaultFS // fs as the storage sees it: it can fill up
	stuck       *stuckReady  // a Ready the full disk did not take; nil normally
	lost        bool         // its data directory was lost: it stays down
	dying       bool         // a crash point is armed: the next writes crash it
	incarnation int
	phase       int64
	retired     bool   // removed from the cluster: stays down
	joined      bool   // seen in an applied configuration
	memberSince uint64 // the index of the first applied configuration it is in

	// The state machine (volatile): a hash chain over applied entries.
	applied uint64
	hash    uint64
	conf    raft.ConfState

	proposals map[uint64]proposal
	reads     map[uint64]readRequest
	role      raft.Role
}

// stuckReady is a Ready whose persistence failed on a full disk. As
// node.Node does, the node holds it, sends and applies nothing, takes no
// messages and no ticks, and writes it again on every tick.
type stuckReady struct {
	rd           raft.Ready
	snapshotDone bool
}

type proposal struct {
	term uint64
	data string
	at   int64
}

type readRequest struct {
	minIndex uint64 // the highest acknowledged write when the read began
}

type ackedWrite struct {
	index uint64
	data  string
}

// New returns a simulator for cfg.
func New(cfg Config) (*Sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Sim{
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(cfg.Seed, 0x51a)),
		nodes:  map[uint64]*node{},
		cut:    map[[2]uint64]bool{},
		queued: map[uint64]int{},
		check:  newChecker(),
	}
	return s, nil
}

// SetTrace makes the run write a line per notable event (faults, role
// changes, membership) to w.
func (s *Sim) SetTrace(w io.Writer) { s.trace = w }

// Run simulates one seed and checks it.
func Run(cfg Config) Result {
	s, err := New(cfg)
	if err != nil {
		return Result{Config: cfg, Err: err}
	}
	return s.Run()
}

// Run runs the simulation to its end or to the first violation. A panic
// in the core (a failed assertion) is reported as a violation too.
func (s *Sim) Run() (res Result) {
	defer func() {
		if p := recover(); p != nil {
			var f assert.Failure
			if pf, ok := p.(assert.Failure); ok {
				f = pf
			} else {
				f.Message = fmt.Sprintf("%v\n%s", p, debug.Stack())
			}
			s.fail("assertion", "%s", f.Message)
		}
		s.stats.SimulatedTime = time.Duration(s.now) * time.Microsecond
		res = Result{Config: s.cfg, Stats: s.stats}
		if s.failure != nil {
			res.Err = s.failure
		}
	}()
	s.start()
	for s.failure == nil && !s.livenessDone {
		e := s.next()
		if e == nil {
			break
		}
		s.step(e)
	}
	if s.failure == nil {
		s.finalChecks()
	}
	return
}

// advance processes events until simulated time d (tests drive runs step
// by step with it).
func (s *Sim) advance(d time.Duration) {
	until := s.us(d)
	for s.failure == nil && len(s.events) > 0 && s.events[0].at <= until {
		s.step(s.next())
	}
	s.now = max(s.now, until)
}

// step moves the clock to e and handles it.
func (s *Sim) step(e *event) {
	s.now = e.at
	s.stats.Steps++
	s.handle(e)
}

func (s *Sim) us(d time.Duration) int64 { return int64(d / time.Microsecond) }

func (s *Sim) tracef(format string, args ...any) {
	if s.trace != nil {
		fmt.Fprintf(s.trace, "%10.3fs ", float64(s.now)/1e6)
		fmt.Fprintf(s.trace, format+"\n", args...)
	}
}

func (s *Sim) fail(check, format string, args ...any) {
	if s.failure != nil {
		return
	}
	s.failure = &Violation{
		Seed:       s.cfg.Seed,
		At:         time.Duration(s.now) * time.Microsecond,
		Check:      check,
		Detail:     fmt.Sprintf(format, args...),
		Replay:     s.cfg.ReplayCommand(),
		TestReplay: s.cfg.TestReplayCommand(),
	}
	s.tracef("VIOLATION %s: %s", check, s.failure.Detail)
}

// exp draws an exponentially distributed delay with the given mean.
func (s *Sim) exp(mean time.Duration) int64 {
	return max(1, int64(s.rng.ExpFloat64()*float64(s.us(mean))))
}

func (s *Sim) start() {
	peers := make([]uint64, s.cfg.Nodes)
	for i := range peers {
		peers[i] = uint64(i + 1)
	}
	s.nextID = uint64(s.cfg.Nodes + 1)
	for _, id := range peers {
		n := s.addNode(id)
		s.boot(n, peers)
	}
	s.chaos = len(s.cfg.Faults) > 0 && s.cfg.Chaos > 0
	s.schedule(&event{at: s.us(s.cfg.Chaos), kind: eventPhase})
	s.schedule(&event{at: s.exp(s.cfg.WriteInterval), kind: eventClientWrite})
	s.schedule(&event{at: s.exp(s.cfg.ReadInterval), kind: eventClientRead})
	if s.chaos {
		// Let a first leader emerge before the world starts breaking.
		warmup := s.us(time.Duration(3*s.cfg.ElectionTicks) * s.cfg.Tick)
		s.schedule(&event{at: warmup + s.exp(s.cfg.FaultInterval), kind: eventFault})
	}
}

func (s *Sim) addNode(id uint64) *node {
	n := &node{id: id, phase: s.rng.Int64N(s.us(s.cfg.Tick))}
	if s.cfg.AlignTicks {
		n.phase = 0
	}
	if s.cfg.Disk {
		n.fs = vfs.NewMemFS()
		n.fault = vfs.NewFaultFS(n.fs, s.cfg.Seed^id, nil)
	} else {
		n.storage = shell.NewMemoryStorage()
	}
	s.nodes[id] = n
	s.ids = append(s.ids, id)
	return n
}

// diskDir is where a node's storage lives on its MemFS.
const diskDir = "/data"

var discard = slog.New(slog.DiscardHandler)

// openDisk (re)opens a node's durable storage after a crash: the WAL is
// replayed from what the crash left on its MemFS.
func (s *Sim) openDisk(n *node) bool {
	d, err := raftstore.Open(n.fault, diskDir, raftstore.Options{SegmentBytes: 64 << 10, Logger: discard})
	switch {
	case n.lost && errors.Is(err, raftstore.ErrLost):
		// What the server does too: a node that lost its log must not
		// run; it stays down until the operator replaces it.
		s.tracef("node %d refuses to start: %v", n.id, err)
		return false
	case n.lost && err == nil:
		_ = d.Close()
		s.fail("lost data directory", "node %d restarted on a directory that lost its log, vote and snapshot", n.id)
		return false
	case err != nil:
		s.fail("storage recovery", "node %d: %v", n.id, err)
		return false
	}
	// As the server does: a new directory gets an identity, so that
	// losing its log later is refused rather than taken for a new node.
	if _, ok := d.Identity(); !ok {
		if err := d.SetIdentity(raftstore.Identity{NodeID: n.id}); err != nil {
			_ = d.Close()
			s.storageFailed(n, "set identity", err)
			return false
		}
	}
	n.storage = d
	return true
}

// boot starts (or restarts) a node's core from its storage; everything
// volatile is rebuilt from the snapshot and the log.
func (s *Sim) boot(n *node, peers []uint64) {
	if n.fs != nil && !s.openDisk(n) {
		return
	}
	n.incarnation++
	cfg := raft.DefaultConfig()
	cfg.ID = n.id
	cfg.Storage = n.storage
	cfg.Peers = peers
	cfg.Rand = rand.New(rand.NewPCG(s.cfg.Seed, n.id<<20|uint64(n.incarnation)))
	cfg.ElectionTicks = s.cfg.ElectionTicks
	cfg.HeartbeatTicks = s.cfg.HeartbeatTicks
	cfg.PreVote = s.cfg.PreVote
	cfg.CheckQuorum = s.cfg.CheckQuorum
	// Small, seed-chosen flow-control limits: appends that carry a few
	// entries leave logs partly replicated, where the subtle cases live
	// (Figure 8).
	cfg.MaxAppendBytes = []uint64{4, 16, 256}[s.cfg.Seed%3]
	cfg.MaxInflightMsgs = []int{1, 2, 8}[(s.cfg.Seed/3)%3]
	core, err := raft.New(cfg)
	if err != nil {
		s.fail("restart", "node %d: %v", n.id, err)
		return
	}
	n.core = core
	n.role = raft.Follower
	n.proposals = map[uint64]proposal{}
	n.reads = map[uint64]readRequest{}
	snap, _ := n.storage.Snapshot()
	n.applied = snap.Metadata.Index
	n.conf = snap.Metadata.ConfState
	n.hash = 0
	if len(snap.Data) == 8 {
		n.hash = binary.BigEndian.Uint64(snap.Data)
	}
	s.check.restarted(s, n)
	// Ticks start at the node's own phase within the tick.
	first := s.now - s.now%s.us(s.cfg.Tick) + n.phase
	if first <= s.now {
		first += s.us(s.cfg.Tick)
	}
	s.schedule(&event{at: first, kind: eventTick, node: n.id, incarnation: n.incarnation})
	s.process(n)
}

func (s *Sim) crash(n *node) {
	if n.core == nil {
		return
	}
	s.tracef("crash node %d (%v)", n.id, n.role)
	if n.fs != nil {
		// Power loss: only what was synced is sure to survive; some of
		// the rest may, torn.
		if d, ok := n.storage.(*raftstore.Disk); ok {
			_ = d.Close()
		}
		n.fs.CrashTorn(s.rng)
		n.storage = nil
		n.dying = false
		n.stuck = nil
	}
	n.core = nil
	n.role = 0
	n.incarnation++
	n.proposals = nil
	n.reads = nil
}

func (s *Sim) up(id uint64) *node {
	if n := s.nodes[id]; n != nil && n.core != nil {
		return n
	}
	return nil
}

// leader returns the running leader of the highest term, or nil.
func (s *Sim) leader() *node {
	var best *node
	var term uint64
	for _, id := range s.ids {
		n := s.nodes[id]
		if n.core == nil || n.role != raft.Leader {
			continue
		}
		if t := n.core.Status().Term; best == nil || t > term {
			best, term = n, t
		}
	}
	return best
}

func (s *Sim) handle(e *event) {
	switch e.kind {
	case eventTick:
		n := s.nodes[e.node]
		if n.core == nil || n.incarnation != e.incarnation {
			return
		}
		if n.stuck != nil {
			s.retryStuck(n)
		} else {
			n.core.Tick()
			s.process(n)
		}
		e.at += s.us(s.cfg.Tick)
		s.schedule(e)
	case eventDeliver:
		s.deliver(e.msg)
	case eventClientWrite:
		s.clientWrite()
		if s.chaos || !s.livenessMet {
			s.schedule(&event{at: s.now + s.exp(s.cfg.WriteInterval), kind: eventClientWrite})
		}
	case eventClientRead:
		s.clientRead()
		if s.chaos {
			s.schedule(&event{at: s.now + s.exp(s.cfg.ReadInterval), kind: eventClientRead})
		}
	case eventFault:
		if s.chaos {
			s.injectFault()
			s.schedule(&event{at: s.now + s.exp(s.cfg.FaultInterval), kind: eventFault})
		}
	case eventHeal:
		if s.chaos {
			clear(s.cut)
			s.tracef("heal partitions")
		}
	case eventSpace:
		if n := s.nodes[e.node]; n.fault != nil {
			n.fault.SetInjector(nil)
			s.tracef("node %d's disk has space again", n.id)
		}
	case eventRestart:
		if n := s.nodes[e.node]; s.chaos && n.core == nil && !n.retired && n.incarnation == e.incarnation {
			s.tracef("restart node %d", n.id)
			s.boot(n, nil)
		}
	case eventPhase:
		s.endChaos()
	case eventCrash:
		// A crash point that no write reached in time: crash now.
		if n := s.nodes[e.node]; n.dying && n.incarnation == e.incarnation {
			n.fs.SetCrashPoint(0)
			s.crash(n)
		}
	}
	s.checkLiveness()
}

// ---- The network ----

func (s *Sim) send(m raft.Message) {
	s.check.sent(s, m)
	if s.queued[m.To] >= maxQueuedPerNode {
		s.stats.Dropped++
		return
	}
	copies := 1
	if s.chaos {
		if s.cfg.Faults.Has(FaultLoss) && s.rng.Float64() < 0.05 {
			s.stats.Dropped++
			return
		}
		if s.cfg.Faults.Has(FaultDuplicate) && s.rng.Float64() < 0.02 {
			copies = 2
		}
	}
	for range copies {
		delay := s.us(s.cfg.LatencyMin) + s.rng.Int64N(s.us(s.cfg.LatencyMax-s.cfg.LatencyMin)+1)
		if s.chaos && s.cfg.Faults.Has(FaultReorder) {
			delay += s.rng.Int64N(2 * s.us(s.cfg.Tick))
		}
		if s.chaos && s.cfg.Faults.Has(FaultDelay) && s.rng.Float64() < 0.02 {
			delay += s.rng.Int64N(20 * s.us(s.cfg.Tick))
		}
		s.queued[m.To]++
		s.stats.MaxQueuedToNode = max(s.stats.MaxQueuedToNode, s.queued[m.To])
		s.schedule(&event{at: s.now + delay, kind: eventDeliver, msg: m})
	}
}

func (s *Sim) deliver(m raft.Message) {
	s.queued[m.To]--
	to := s.up(m.To)
	if to == nil || s.cut[[2]uint64{m.From, m.To}] || to.stuck != nil {
		s.stats.Dropped++
		return
	}
	s.stats.Delivered++
	if err := to.core.Step(m); err != nil {
		s.fail("step", "node %d rejected %v: %v", to.id, m, err)
		return
	}
	s.process(to)
}

// ---- The Ready contract ----

// process handles a node's Readies: persist, check, send, apply, advance.
func (s *Sim) process(n *node) {
	for s.failure == nil && n.core != nil && n.stuck == nil && n.core.HasReady() {
		st := &stuckReady{rd: n.core.Ready()}
		// 1. Persist. The storage is the durable state: whatever it
		// acknowledged survives a crash, and nothing else does.
		if op, err := s.persist(n, st); err != nil {
			if vfs.IsNoSpace(err) && !(n.dying && errors.Is(err, vfs.ErrCrashed)) {
				n.stuck = st
				s.tracef("node %d: %s on a full disk; holding the Ready", n.id, op)
				return
			}
			s.storageFailed(n, op, err)
			return
		}
		if !s.finish(n, st.rd) {
			return
		}
	}
}

// persist makes a Ready durable; it names the operation that failed.
func (s *Sim) persist(n *node, st *stuckReady) (string, error) {
	rd := st.rd
	if !rd.Snapshot.IsEmpty() && !st.snapshotDone {
		if err := n.storage.ApplySnapshot(rd.Snapshot); err != nil {
			return "apply snapshot", err
		}
		st.snapshotDone = true
	}
	if !rd.HardState.IsEmpty() || len(rd.Entries) > 0 {
		if err := n.storage.Save(rd.HardState, rd.Entries); err != nil {
			return "save", err
		}
	}
	return "", nil
}

// retryStuck repairs a stuck node's storage and writes its Ready again;
// once that works the node goes on as if the write had been slow.
func (s *Sim) retryStuck(n *node) {
	d := n.storage.(*raftstore.Disk)
	op, err := "repair", d.Repair()
	if err == nil {
		op, err = s.persist(n, n.stuck)
	}
	if err != nil {
		if !vfs.IsNoSpace(err) {
			s.storageFailed(n, op, err)
		}
		return
	}
	st := n.stuck
	n.stuck = nil
	s.stats.StuckReadies++
	s.tracef("node %d: the disk took the held Ready", n.id)
	if s.finish(n, st.rd) {
		s.process(n)
	}
}

// finish does the rest of a durable Ready: check, send, apply, advance. It
// reports false if the node is gone (retired while applying).
func (s *Sim) finish(n *node, rd raft.Ready) bool {
	core := n.core
	s.check.persisted(s, n, rd)
	if rd.SoftState != nil {
		s.roleChanged(n, *rd.SoftState)
	}
	// 2. Send, only after persisting.
	for _, m := range rd.Messages {
		s.send(m)
	}
	// 3. Apply.
	if !rd.Snapshot.IsEmpty() {
		s.applySnapshot(n, rd.Snapshot)
	}
	for _, e := range rd.CommittedEntries {
		s.apply(n, e)
	}
	for _, rs := range rd.ReadStates {
		s.readConfirmed(n, rs)
	}
	// 4. Advance, unless applying retired the node.
	if n.core != core {
		return false
	}
	core.Advance(rd)
	s.maybeSnapshot(n)
	return true
}

func (s *Sim) roleChanged(n *node, soft raft.SoftState) {
	old := n.role
	n.role = soft.Role
	if soft.Role == raft.Leader {
		s.stats.Leaders++
		s.tracef("node %d leads term %d", n.id, n.core.Status().Term)
		s.check.becameLeader(s, n)
	}
	if old == raft.Leader && soft.Role != raft.Leader {
		// Reads pending on a deposed leader are dropped by the core.
		clear(n.reads)
	}
}

func chain(h uint64, e raft.Entry) uint64 {
	const prime = 1099511628211
	h ^= e.Index
	h *= prime
	h ^= e.Term
	h *= prime
	h ^= uint64(e.Type)
	h *= prime
	for _, b := range e.Data {
		h ^= uint64(b)
		h *= prime
	}
	return h
}

func (s *Sim) apply(n *node, e raft.Entry) {
	if e.Index != n.applied+1 {
		s.fail("apply order", "node %d applied %d after %d", n.id, e.Index, n.applied)
		return
	}
	n.applied = e.Index
	n.hash = chain(n.hash, e)
	s.check.applied(s, n, e)
	switch e.Type {
	case raft.EntryConfChange:
		cc, err := raft.UnmarshalConfChange(e.Data)
		if err != nil {
			return
		}
		if cs, err := raft.ApplyConfChange(n.conf, cc); err == nil {
			n.conf = cs
			s.confApplied(cs, e.Index)
		}
	case raft.EntryNormal:
		p, ok := n.proposals[e.Index]
		if !ok {
			return
		}
		delete(n.proposals, e.Index)
		if p.term == e.Term && p.data == string(e.Data) {
			s.acked = append(s.acked, ackedWrite{index: e.Index, data: p.data})
			s.maxAcked = max(s.maxAcked, e.Index)
			s.stats.AckedWrites++
			if s.healedAt > 0 && p.at >= s.healedAt && !s.livenessMet {
				s.livenessMet = true
				s.tracef("liveness: write proposed after the faults stopped committed at %d", e.Index)
			}
		}
	}
}

func (s *Sim) applySnapshot(n *node, snap raft.Snapshot) {
	n.applied = snap.Metadata.Index
	n.hash = binary.BigEndian.Uint64(snap.Data)
	n.conf = snap.Metadata.ConfState
	s.check.snapshotInstalled(s, n)
	for i := range n.proposals {
		if i <= n.applied {
			delete(n.proposals, i) // outcome unknown to this node
		}
	}
}

func (s *Sim) maybeSnapshot(n *node) {
	if n.core == nil {
		return
	}
	// The snapshot's index is FirstIndex()-1; asking Snapshot() instead
	// would read and verify the whole snapshot file after every Ready.
	first, _ := n.storage.FirstIndex()
	if n.applied < first-1+s.cfg.SnapshotEntries {
		return
	}
	data := binary.BigEndian.AppendUint64(nil, n.hash)
	if err := n.storage.Compact(n.applied, data, n.conf); err != nil {
		if vfs.IsNoSpace(err) && !(n.dying && errors.Is(err, vfs.ErrCrashed)) {
			return // a snapshot is never fatal: tried again after the next Ready
		}
		s.storageFailed(n, "compact", err)
		return
	}
	s.stats.Snapshots++
}

// storageFailed handles a failed write: the crash point of a dying node
// (the node crashes mid-Ready, before sending anything), or a bug.
func (s *Sim) storageFailed(n *node, op string, err error) {
	if n.dying && errors.Is(err, vfs.ErrCrashed) {
		s.tracef("node %d crashes during %s", n.id, op)
		s.crash(n)
		return
	}
	s.fail("storage", "node %d: %s: %v", n.id, op, err)
}

// confApplied notes a committed configuration, the one at index: nodes in
// it have joined; nodes that had joined at an earlier index and are not in
// it were removed, and are retired (stopped for good). A node catching up
// applies old configurations that predate it; those say nothing.
func (s *Sim) confApplied(cs raft.ConfState, index uint64) {
	for _, id := range s.ids {
		n := s.nodes[id]
		member := cs.IsMember(id)
		switch {
		case member:
			if !n.joined || index < n.memberSince {
				n.memberSince = index
			}
			n.joined = true
		case n.joined && !n.retired && index > n.memberSince:
			n.retired = true
			s.tracef("node %d retires: removed from the cluster", id)
			s.crash(n)
		}
	}
}

// ---- Clients ----

func (s *Sim) pickNode() *node {
	if s.rng.Float64() < 0.8 {
		if l := s.leader(); l != nil {
			return l
		}
	}
	return s.randomLiveNode()
}

// randomLiveNode returns a running node chosen by the seed, or nil.
func (s *Sim) randomLiveNode() *node {
	var live []*node
	for _, id := range s.ids {
		if n := s.up(id); n != nil {
			live = append(live, n)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[s.rng.IntN(len(live))]
}

func (s *Sim) clientWrite() {
	n := s.pickNode()
	if n == nil || n.stuck != nil {
		return // a node with a full disk refuses writes (disk_full)
	}
	s.writeSeq++
	data := fmt.Sprintf("w%d", s.writeSeq)
	index, term, err := n.core.Propose([]byte(data))
	if err != nil {
		return // not the leader, or busy: the client would retry elsewhere
	}
	s.stats.Writes++
	n.proposals[index] = proposal{term: term, data: data, at: s.now}
	s.process(n)
}

func (s *Sim) clientRead() {
	// Reads go to any node that believes it leads, stale leaders
	// included: those are the reads ReadIndex must get right.
	var leaders []*node
	for _, id := range s.ids {
		if n := s.up(id); n != nil && n.role == raft.Leader {
			leaders = append(leaders, n)
		}
	}
	n := s.pickNode()
	if len(leaders) > 0 {
		n = leaders[s.rng.IntN(len(leaders))]
	}
	if n == nil || n.stuck != nil {
		return
	}
	s.readSeq++
	if err := n.core.ReadIndex(s.readSeq); err != nil {
		return
	}
	n.reads[s.readSeq] = readRequest{minIndex: s.maxAcked}
	s.process(n)
}

// readConfirmed checks a ReadIndex result: every write acknowledged before
// the read began must be at or below the read index, or the read could
// miss it (linearizability, dissertation §6.4).
func (s *Sim) readConfirmed(n *node, rs raft.ReadState) {
	req, ok := n.reads[rs.ID]
	if !ok {
		return
	}
	delete(n.reads, rs.ID)
	if rs.Index < req.minIndex {
		s.fail("linearizable read", "node %d confirmed read %d at index %d, but a write at %d was acknowledged before it began",
			n.id, rs.ID, rs.Index, req.minIndex)
		return
	}
	s.stats.Reads++
}

// ---- Faults ----

func (s *Sim) injectFault() {
	var choices []Fault
	for _, f := range []Fault{FaultPartition, FaultCrash, FaultMembership} {
		if s.cfg.Faults.Has(f) {
			choices = append(choices, f)
		}
	}
	for _, f := range []Fault{FaultDiskFull, FaultLostDir} {
		if s.cfg.Disk && s.cfg.Faults.Has(f) {
			choices = append(choices, f)
		}
	}
	if len(choices) == 0 {
		return
	}
	switch choices[s.rng.IntN(len(choices))] {
	case FaultPartition:
		s.partition()
	case FaultCrash:
		s.crashSome()
	case FaultDiskFull:
		s.fillDisk()
	case FaultLostDir:
		s.loseDir()
	case FaultMembership:
		if s.rng.IntN(3) == 0 {
			s.transferLeadership()
		} else {
			s.changeMembership()
		}
	}
}

// transferLeadership asks the leader to hand over to a random voter
// (§3.10); a transfer is membership's companion in operations.
func (s *Sim) transferLeadership() {
	l := s.leader()
	if l == nil {
		return
	}
	voters := l.core.Status().Conf.Voters
	to := voters[s.rng.IntN(len(voters))]
	if to == l.id || l.core.TransferLeadership(to) != nil {
		return
	}
	s.stats.Transfers++
	s.tracef("node %d transfers leadership to %d", l.id, to)
	s.process(l)
}

func (s *Sim) activeIDs() []uint64 {
	var ids []uint64
	for _, id := range s.ids {
		if !s.nodes[id].retired {
			ids = append(ids, id)
		}
	}
	return ids
}

func (s *Sim) partition() {
	ids := s.activeIDs()
	if len(ids) < 2 {
		return
	}
	s.stats.Partitions++
	if s.rng.IntN(2) == 0 {
		// Symmetric: a random minority (or, sometimes, half) is cut off.
		s.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		k := 1 + s.rng.IntN(len(ids)/2)
		group := ids[:k]
		for _, a := range group {
			for _, b := range ids[k:] {
				s.cut[[2]uint64{a, b}] = true
				s.cut[[2]uint64{b, a}] = true
			}
		}
		s.tracef("partition %v from the rest", group)
	} else {
		// One-way: a few links drop in one direction only.
		for range 1 + s.rng.IntN(3) {
			a, b := ids[s.rng.IntN(len(ids))], ids[s.rng.IntN(len(ids))]
			if a != b {
				s.cut[[2]uint64{a, b}] = true
				s.tracef("cut %d->%d", a, b)
			}
		}
	}
	s.schedule(&event{at: s.now + s.us(100*time.Millisecond) + s.rng.Int64N(s.us(time.Second)), kind: eventHeal})
}

func (s *Sim) crashSome() {
	down := 0
	for _, id := range s.activeIDs() {
		if s.nodes[id].core == nil {
			down++
		}
	}
	// Mostly keep a majority up, so that the cluster makes progress
	// between faults; sometimes take the majority down too.
	if 2*(down+1) >= len(s.activeIDs()) && s.rng.IntN(4) != 0 {
		return
	}
	victim := s.leader()
	if victim == nil || s.rng.IntN(2) != 0 {
		victim = s.randomLiveNode()
	}
	if victim == nil {
		return
	}
	s.stats.Crashes++
	if victim.fs != nil && s.rng.IntN(2) == 0 {
		// Crash in the middle of a coming write: the storage's next few
		// file operations are the last.
		victim.dying = true
		victim.fs.SetCrashPoint(1 + s.rng.IntN(6))
		s.schedule(&event{at: s.now + s.us(100*time.Millisecond), kind: eventCrash, node: victim.id, incarnation: victim.incarnation})
	} else {
		s.crash(victim)
	}
	restartAt := s.now + s.us(50*time.Millisecond) + s.rng.Int64N(s.us(1500*time.Millisecond))
	s.schedule(&event{at: restartAt, kind: eventRestart, node: victim.id, incarnation: victim.incarnation})
}

// fillDisk fills a node's disk for a while: its writes fail with ENOSPC
// (a seeded part of each written first), and it holds its Ready until a
// retry after the space returns succeeds.
func (s *Sim) fillDisk() {
	n := s.randomLiveNode()
	if n == nil || n.fault == nil {
		return
	}
	s.stats.DiskFulls++
	n.fault.SetInjector(vfs.NoSpace())
	s.tracef("node %d's disk is full", n.id)
	s.schedule(&event{at: s.now + s.us(50*time.Millisecond) + s.rng.Int64N(s.us(1500*time.Millisecond)), kind: eventSpace, node: n.id})
}

// loseDir deletes a node's log, snapshots and vote file, as an operator's
// mistake or a failed disk would, and crashes it: its restart must be
// refused (its IDENTITY remains), and it stays down. At most one node per
// run, and only where the others still form a majority.
func (s *Sim) loseDir() {
	l := s.leader()
	if l == nil || s.anyLost() {
		return
	}
	conf := l.core.Status().Conf
	if conf.IsJoint() || len(conf.Voters) < 3 {
		return
	}
	n := s.nodes[conf.Voters[s.rng.IntN(len(conf.Voters))]]
	if n.fs == nil || n.dying {
		return
	}
	s.crash(n)
	if n.fs.Crashed() {
		return
	}
	n.fs.ReleaseLocks()
	for _, dir := range []string{diskDir + "/wal", diskDir + "/snap"} {
		names, _ := n.fs.List(dir)
		for _, name := range names {
			_ = n.fs.Remove(dir + "/" + name)
		}
		_ = n.fs.Remove(dir)
	}
	_ = n.fs.Remove(diskDir + "/VOTE")
	n.lost = true
	s.stats.LostDirs++
	s.tracef("node %d's data directory is lost (log, snapshots, vote)", n.id)
	s.schedule(&event{at: s.now + s.us(50*time.Millisecond), kind: eventRestart, node: n.id, incarnation: n.incarnation})
}

// anyLost reports whether a node that lost its directory is still a
// member (not yet removed).
func (s *Sim) anyLost() bool {
	for _, id := range s.ids {
		if n := s.nodes[id]; n.lost && !n.retired {
			return true
		}
	}
	return false
}

// membershipOptions lists the changes the leader may be asked for: add a
// learner, promote or remove one, replace a voter with one (joint), remove
// a voter.
func (s *Sim) membershipOptions(conf raft.ConfState) [][]raft.ConfChangeSingle {
	var options [][]raft.ConfChangeSingle
	minVoters, maxVoters := max(1, s.cfg.Nodes-1), s.cfg.Nodes+1
	if len(conf.Learners) == 0 && len(s.activeIDs()) < 2*s.cfg.Nodes+2 {
		options = append(options, []raft.ConfChangeSingle{{Type: raft.ConfChangeAddLearner, NodeID: s.nextID}})
	}
	for _, id := range conf.Learners {
		if len(conf.Voters) < maxVoters {
			options = append(options, []raft.ConfChangeSingle{{Type: raft.ConfChangeAddVoter, NodeID: id}})
		}
		options = append(options, []raft.ConfChangeSingle{{Type: raft.ConfChangeRemove, NodeID: id}})
		// Replace a voter with the learner in one change: two voters
		// change, so it goes through joint consensus (§4.3).
		out := conf.Voters[s.rng.IntN(len(conf.Voters))]
		replace := []raft.ConfChangeSingle{{Type: raft.ConfChangeAddVoter, NodeID: id}, {Type: raft.ConfChangeRemove, NodeID: out}}
		options = append(options, replace, replace) // twice: the rarer, subtler case
	}
	if len(conf.Voters) > minVoters {
		id := conf.Voters[s.rng.IntN(len(conf.Voters))]
		options = append(options, []raft.ConfChangeSingle{{Type: raft.ConfChangeRemove, NodeID: id}})
	}
	return options
}

// lostMember returns a member of conf that lost its directory.
func (s *Sim) lostMember(conf raft.ConfState) (uint64, bool) {
	for _, id := range s.ids {
		if s.nodes[id].lost && conf.IsMember(id) {
			return id, true
		}
	}
	return 0, false
}

// changeMembership asks the leader for one change: add a learner, promote
// a caught-up learner, remove a learner, or remove a voter (possibly the
// leader itself).
func (s *Sim) changeMembership() {
	l := s.leader()
	if l == nil {
		return
	}
	st := l.core.Status()
	conf := st.Conf
	if conf.IsJoint() {
		return // the leader leaves it by itself
	}
	var options [][]raft.ConfChangeSingle
	if id, ok := s.lostMember(conf); ok {
		// The operator replaces a node that lost its directory: removing
		// it comes first, and nothing else changes until then (a smaller
		// cluster with a dead member could lose its majority).
		options = [][]raft.ConfChangeSingle{{{Type: raft.ConfChangeRemove, NodeID: id}}}
	} else {
		options = s.membershipOptions(conf)
	}
	if len(options) == 0 {
		return
	}
	changes := options[s.rng.IntN(len(options))]
	_, _, err := l.core.ProposeConfChange(raft.ConfChange{Changes: changes})
	if err != nil {
		return // pending change, or a learner not caught up: try later
	}
	s.stats.ConfChanges++
	if len(changes) > 1 {
		s.stats.JointChanges++
	}
	s.tracef("node %d proposes %v", l.id, changes)
	change := changes[0]
	if change.Type == raft.ConfChangeAddLearner && change.NodeID == s.nextID {
		s.nextID++
		s.boot(s.addNode(change.NodeID), nil)
	}
	s.process(l)
}

// ---- Phases and liveness ----

// endChaos stops the faults: links heal, crashed members restart, and the
// liveness clock starts.
func (s *Sim) endChaos() {
	s.chaos = false
	clear(s.cut)
	s.healedAt = max(s.now, 1)
	s.tracef("faults stop")
	for _, id := range s.ids {
		n := s.nodes[id]
		if n.dying {
			n.fs.SetCrashPoint(0)
			n.dying = false
		}
		if !n.joined && !n.retired && s.leaderConfExcludes(id) {
			// A learner whose addition never committed: give up on it.
			n.retired = true
			s.crash(n)
		}
		if n.fault != nil {
			n.fault.SetInjector(nil) // space returns
		}
		if n.core == nil && !n.retired {
			s.boot(n, nil) // refused for a node that lost its directory
		}
	}
	s.schedule(&event{at: s.now + s.exp(s.cfg.WriteInterval), kind: eventClientWrite})
}

func (s *Sim) leaderConfExcludes(id uint64) bool {
	for _, other := range s.ids {
		if n := s.up(other); n != nil {
			if cs := n.core.Status().Conf; cs.IsMember(id) {
				return false
			}
		}
	}
	return true
}

// checkLiveness fails the run if, after the faults stopped, no write
// committed within the bound, or the members did not all catch up.
func (s *Sim) checkLiveness() {
	if s.healedAt == 0 || s.failure != nil {
		return
	}
	deadline := s.healedAt + s.us(s.cfg.LivenessBound)
	if !s.livenessMet {
		if s.now > deadline {
			s.fail("liveness", "no write committed within %v after the faults stopped; %s", s.cfg.LivenessBound, s.describe())
		}
		return
	}
	if s.converged() {
		s.livenessDone = true
		return
	}
	if s.now > deadline+s.us(s.cfg.LivenessBound) {
		s.fail("liveness", "members did not catch up to acknowledged index %d within %v; %s", s.maxAcked, s.cfg.LivenessBound, s.describe())
	}
}

// converged reports whether every running member applied every
// acknowledged write.
func (s *Sim) converged() bool {
	l := s.leader()
	if l == nil {
		return false
	}
	conf := l.core.Status().Conf
	for _, id := range append(append(slices.Clone(conf.Voters), conf.VotersOutgoing...), conf.Learners...) {
		n := s.nodes[id]
		if n == nil || n.retired || n.lost {
			continue
		}
		if n.core == nil || n.applied < s.maxAcked {
			return false
		}
	}
	return true
}

func (s *Sim) describe() string {
	out := ""
	for _, id := range s.ids {
		n := s.nodes[id]
		switch {
		case n.retired:
			out += fmt.Sprintf("[%d retired]", id)
		case n.lost:
			out += fmt.Sprintf("[%d lost its directory]", id)
		case n.core == nil:
			out += fmt.Sprintf("[%d down]", id)
		default:
			st := n.core.Status()
			out += fmt.Sprintf("[%d %v term=%d lead=%d commit=%d applied=%d last=%d %v]",
				id, st.Role, st.Term, st.Lead, st.Commit, n.applied, st.LastIndex, st.Conf)
		}
	}
	return out
}

// finalChecks runs after the last step: every acknowledged write is in the
// agreed history, and every running member holds it.
func (s *Sim) finalChecks() {
	if !s.livenessDone && s.healedAt != 0 {
		s.fail("liveness", "the run ended before the cluster converged; %s", s.describe())
		return
	}
	for _, w := range s.acked {
		fact, ok := s.check.appliedAt[w.index]
		if !ok || fact.data != hashString(w.data) {
			s.fail("acknowledged write lost", "write %q acknowledged at index %d is not what the cluster applied there", w.data, w.index)
			return
		}
	}
}

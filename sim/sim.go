package sim

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"runtime/debug"
	"time"

	"coord/internal/assert"
	shell "coord/node"
	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/vfs"
)

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
	Restores        int // snapshots from a leader decoded in the background and swapped in
	Writes          int // client writes accepted by a leader
	AckedWrites     int // client writes applied and acknowledged
	Reads           int // ReadIndex reads served
	FollowerReads   int // of which served by a follower (with the leader's read index)
	MaxQueuedToNode int // the most messages ever in flight to one node
	DiskFulls       int // times a node's disk filled up
	StuckReadies    int // Readies held because the disk was full, then written
	LostDirs        int // data directories lost (and restarts refused)
	Kills           int // processes killed (peers see their connections close)
	Cuts            int // connections reset between live nodes
	Hints           int // closed connections reported to a node (ReportPeerGone)
	// LeaderChanges counts elections after the first leader's.
	LeaderChanges int
	// UnprovokedLeaderChanges counts the leader changes no fault explains:
	// the new leader was elected more than two maximal election timeouts
	// after the last fault, no message faults were active, and the
	// leaders that stopped leading since the election before did not all
	// stop within that window of a fault. A run without faults fails on
	// the first one.
	UnprovokedLeaderChanges int
	// CommitsLost counts restarts that lost a commit index saved without
	// sync, as they may.
	CommitsLost int
	// ForwardedWrites counts the writes a follower forwarded to its
	// leader (raft.MsgProposalRequest), of Writes; ForwardedAcked those
	// the follower saw applied in its own log, of AckedWrites.
	ForwardedWrites, ForwardedAcked int
	// ForwardedRefused counts forwarded writes the leader (or a deposed
	// one) refused, ForwardedLost those placed by a leader whose entry was
	// then overwritten, ForwardedUnanswered those given up unanswered;
	// the first two are checked never to apply.
	ForwardedRefused, ForwardedLost, ForwardedUnanswered int
	// ReadsRefused counts the read index refusals delivered (a follower's
	// read sent to a node that does not lead, or held by a deposed
	// leader).
	ReadsRefused int
	// ElectionWrites counts the writes a candidate held
	// (node.Handler.ProposeAtElection), of Writes; ElectionWritesRefused
	// those it refused at once (past the held-proposal bounds, or no
	// candidate any more), ElectionWritesNotElected those it held and
	// then ended with node.ErrNotElected. Both are checked never to apply.
	ElectionWrites, ElectionWritesRefused, ElectionWritesNotElected int
}

// Add adds o's counts to s, as for a total over many runs: every count and
// the simulated time are summed, MaxQueuedToNode is the larger of the two.
func (s *Stats) Add(o Stats) {
	mq := max(s.MaxQueuedToNode, o.MaxQueuedToNode)
	sv, ov := reflect.ValueOf(s).Elem(), reflect.ValueOf(o)
	for i := range sv.NumField() {
		f := sv.Field(i)
		f.SetInt(f.Int() + ov.Field(i).Int())
	}
	s.MaxQueuedToNode = mq
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
	msg := fmt.Sprintf("sim: seed %d at %v: %s: %s\nreplay: %s", v.Seed, v.At, v.Check, v.Detail, v.Replay)
	if v.TestReplay != "" {
		msg += "\n    or: " + v.TestReplay
	}
	return msg
}

// Is makes errors.Is(err, ErrViolation) true.
func (v *Violation) Is(target error) bool { return target == ErrViolation }

// Sim is one simulated cluster. It is not safe for concurrent use; run
// independent seeds on independent Sims.
type Sim struct {
	cfg Config
	rng *rand.Rand
	// snapshotRng delays background snapshots: a stream of its own, so
	// that the main one, and what each seed replays, is as before.
	snapshotRng *rand.Rand
	// limits are the handlers' byte bounds, drawn by the seed.
	limits byteLimits
	now    int64 // microseconds
	seq    uint64
	events eventQueue
	nodes  map[uint64]*node
	ids    []uint64 // every node ever started, ascending
	nextID uint64
	cut    map[[2]uint64]bool
	links  map[[2]uint64]uint64 // connection generation of each pair (lower ID first); a cut bumps it
	// lastSent is when the last message sent on each one-way link arrives
	// (or would, had it not been lost): a close arrives after it.
	lastSent map[[2]uint64]int64
	queued   map[uint64]int
	chaos    bool
	check    checker
	stats    Stats
	trace    io.Writer

	writeSeq     uint64
	readSeq      uint64 // read IDs, unique in the run
	acked        []ackedWrite
	denied       []deniedWrite // writes answered as never applied
	maxAcked     uint64
	healedAt     int64
	livenessMet  bool
	convergedAt  int64
	failure      *Violation
	livenessDone bool

	lastFault int64 // when the last fault was injected (0: the start)
	leaderAt  int64 // when the latest leader was elected; -1 before the first
	// stepDowns are the leaders that stopped leading (stepped down or
	// crashed) since the latest election: whether any did, and whether
	// each did within the settle window of a fault (leaderChanged).
	stepDowns struct{ any, nearFaults bool }
}

type node struct {
	id          uint64
	h           *shell.Handler // the production Ready handler; nil while down
	storage     shell.Storage  // checkedStorage, around disk or a MemoryStorage
	disk        *raftstore.Disk
	fs          *vfs.MemFS   // the disk under storage, with Config.Disk
	fault       *vfs.FaultFS // fs as the storage sees it: it can fill up
	lost        bool         // its data directory was lost: it stays down
	dying       bool         // a crash point is armed: the next writes crash it
	incarnation int
	phase       int64
	retired     bool   // removed from the cluster: stays down
	joined      bool   // seen in an applied configuration
	memberSince uint64 // the index of the first applied configuration it is in
	machine     *machine
	role        raft.Role

	// forwarded holds the writes this node forwarded to its leader and
	// has not applied yet, by data, with when they were proposed: a
	// forwarded write is acknowledged when its own node applies it.
	forwarded map[string]int64
}

// deniedWrite is a write answered as never applied: forwarded and refused
// or lost to another entry at its index, or held by a candidate that was
// not elected, or refused by it.
type deniedWrite struct{ data, why string }

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
		cfg: cfg,
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x51a)),

		snapshotRng: rand.New(rand.NewPCG(cfg.Seed, 0x5a9)),
		limits:      drawByteLimits(cfg.Seed),
		nodes:       map[uint64]*node{},
		cut:         map[[2]uint64]bool{},
		links:       map[[2]uint64]uint64{},

		lastSent: map[[2]uint64]int64{},
		queued:   map[uint64]int{},
		check:    newChecker(),

		leaderAt: -1,
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
// in the core or the node's handler (a failed assertion) is reported as a
// violation too.
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
	s.tracef("byte limits: %v", s.limits)
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
		n.storage = checkedStorage{Storage: shell.NewMemoryStorage(), s: s, n: n}
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
	d, err := raftstore.Open(n.fault, diskDir, raftstore.Options{SegmentBytes: 64 << 10, Logger: discard,
		Background: s.removeInBackground(n)})
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
	n.disk = d
	n.storage = snapshotStorage{checkedStorage{Storage: d, s: s, n: n}, d}
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
	// The bytes in flight bounded too, or not: the leader holds back
	// appends when either bound is reached.
	cfg.MaxInflightBytes = []uint64{0, 1, 3}[(s.cfg.Seed/9)%3] * cfg.MaxAppendBytes
	n.machine = &machine{viewFollows: s.cfg.viewsFollowState, restores: &s.stats.Restores}
	h, err := shell.NewHandler(shell.HandlerConfig{
		Raft:            cfg,
		Storage:         n.storage,
		Transport:       transport{s},
		StateMachine:    n.machine,
		SnapshotEntries: s.cfg.SnapshotEntries,
		SnapshotBytes:   s.limits.snapshotBytes,
		Background:      s.background(n),
		Hooks:           s.hooks(n),

		MaxElectionProposalBytes: s.limits.electionBytes,
	})
	if err != nil {
		s.fail("restart", "node %d: %v", n.id, err)
		return
	}
	n.h = h
	n.role = raft.Follower
	s.check.restarted(s, n)
	// Ticks start at the node's own phase within the tick.
	first := s.now - s.now%s.us(s.cfg.Tick) + n.phase
	if first <= s.now {
		first += s.us(s.cfg.Tick)
	}
	s.schedule(&event{at: first, kind: eventTick, node: n.id, incarnation: n.incarnation})
	s.process(n)
}

// errCrashed is what a crashed node's handler is stopped with.
var errCrashed = errors.New("sim: node crashed")

// crash stops a node at once: its handler does nothing more (not even the
// rest of a Ready it is in the middle of), and with Config.Disk its file
// system loses what was not synced.
func (s *Sim) crash(n *node) {
	h := n.h
	if h == nil {
		return
	}
	s.tracef("crash node %d (%v)", n.id, n.role)
	s.lastFault = s.now
	if n.role == raft.Leader {
		s.leaderSteppedDown()
	}
	if n.fs != nil {
		// Power loss: only what was synced is sure to survive; some of
		// the rest may, torn.
		_ = n.disk.Close()
		n.fs.CrashTorn(s.rng)
		n.storage, n.disk = nil, nil
		n.dying = false
	}
	n.h = nil
	n.forwarded = nil // the client's connection died with the process
	n.role = 0
	n.incarnation++
	h.Stop(errCrashed)
}

func (s *Sim) up(id uint64) *node {
	if n := s.nodes[id]; n != nil && n.h != nil {
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
		if n.h == nil || n.role != raft.Leader {
			continue
		}
		if t := n.h.Core().Status().Term; best == nil || t > term {
			best, term = n, t
		}
	}
	return best
}

func (s *Sim) handle(e *event) {
	switch e.kind {
	case eventTick:
		n := s.nodes[e.node]
		if n.h == nil || n.incarnation != e.incarnation {
			return
		}
		s.tick(n)
		e.at += s.us(s.cfg.Tick)
		s.schedule(e)
	case eventDeliver:
		s.deliver(e)
	case eventPeerGone:
		s.peerGone(e)
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
			s.lastFault = s.now
			clear(s.cut)
			s.tracef("heal partitions")
		}
	case eventSpace:
		if n := s.nodes[e.node]; n.fault != nil {
			s.lastFault = s.now
			n.fault.SetInjector(nil)
			s.tracef("node %d's disk has space again", n.id)
		}
	case eventRestart:
		if n := s.nodes[e.node]; s.chaos && n.h == nil && !n.retired && n.incarnation == e.incarnation {
			s.lastFault = s.now
			s.tracef("restart node %d", n.id)
			s.boot(n, nil)
		}
	case eventPhase:
		s.endChaos()
	case eventSnapshot:
		s.snapshotWritten(e)
	case eventCrash:
		// A crash point that no write reached in time: crash now.
		if n := s.nodes[e.node]; n.dying && n.incarnation == e.incarnation {
			s.lastFault = s.now
			n.fs.SetCrashPoint(0)
			s.crash(n)
		}
	}
	s.checkLiveness()
}

package node

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"coord/internal/assert"
	"coord/raft"
)

// Result is how a proposal or a read ended.
type Result struct {
	// Index is the proposal's entry index, or the index a read was
	// confirmed at.
	Index uint64
	// Value is the state machine's result for a proposal (the new
	// raft.ConfState for a membership change); nil for a read.
	Value any
	// Err is why the proposal or read failed: ErrProposalLost,
	// ErrOutcomeUnknown, raft.ErrNotLeader (a read on a deposed leader, or
	// one the core dropped: a follower's leader changed or refused),
	// or the error the handler was stopped with.
	Err error
}

// Waiter hears how a proposal or a read ended. The handler calls it once,
// on the handler's goroutine; it must not block.
type Waiter func(Result)

// Hooks are callbacks for the observers of a handler (the simulator's
// checkers, the transcripts of raft/rafttest, the server's address book).
// Each is optional and is called on the handler's goroutine at the point of
// the Ready contract its doc names. A hook must not block; it may read the
// storage and the core's status, and it may Stop the handler (the
// simulator crashes a node so), after which the handler does nothing more.
type Hooks struct {
	// Persisted is called once a Ready's snapshot, hard state and
	// entries are durable (step 1), before the messages that wait for
	// them are sent (a leader's requests may have gone ahead: see Order).
	Persisted func(rd raft.Ready)
	// Applied is called after each committed entry is applied (in step 0,
	// or in step 3 after a snapshot),
	// empty entries and membership changes included, in log order, before
	// the proposer waiting for it is answered.
	Applied func(e raft.Entry)
	// ConfChanged is called after Applied for a membership change that
	// took effect, with the membership the core worked out for it.
	ConfChanged func(c raft.CommittedConfChange)
	// SnapshotInstalled is called after a snapshot from the leader was
	// restored into the state machine (step 3).
	SnapshotInstalled func(meta raft.SnapshotMetadata)
	// Compacted is called once a snapshot this node took at meta.Index
	// is durable and the log compacted up to it (step 4, or when a
	// background snapshot is done: see snapshot.go).
	Compacted func(meta raft.SnapshotMetadata)
}

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// Raft configures the core; its Storage is set from Storage, and its
	// Rand must be set.
	Raft         raft.Config
	Storage      Storage
	Transport    Transport
	StateMachine StateMachine
	// SnapshotEntries is how many applied entries trigger a snapshot and
	// log compaction; 0 never compacts (Compact still does).
	SnapshotEntries uint64
	// SnapshotBytes, if not 0, also triggers a snapshot once this much
	// entry data was applied since the last one was taken, however few
	// the entries: the log since a snapshot is kept until the next, and
	// ten thousand 1 MiB entries would be 10 GiB of it. It is a cap:
	// SnapshotLogPercent does not hold a snapshot back past it. It takes
	// effect only when SnapshotEntries is not 0.
	SnapshotBytes uint64
	// SnapshotLogPercent, if not 0, makes snapshots amortized: once
	// SnapshotEntries entries were applied since the last snapshot, the
	// next waits further (but not past SnapshotBytes of entry data) until
	// the entry data applied since then reaches this percentage of the last snapshot's
	// size, plus a share drawn from Raft.Rand for each snapshot, up to a
	// quarter more (snapshotJitterDivisor), so that the members of a
	// cluster, which apply the same entries, do not all snapshot at the
	// same moment. A snapshot costs about its size to encode and write,
	// so its cost per write then stays the same however large the state
	// grows, as Redis's auto-aof-rewrite-percentage or an LSM tree's size
	// ratio keep theirs; a restart replays at most about this percentage
	// of the state's size in log (or SnapshotEntries entries, if more),
	// and at most SnapshotBytes: past a state of about 100/P times
	// SnapshotBytes, snapshots come every SnapshotBytes and cost more per
	// write as the state grows, the price of a log kept in memory.
	// 0: SnapshotEntries and SnapshotBytes alone.
	SnapshotLogPercent uint64
	// Background, if set, takes snapshots off the caller's goroutine
	// when the StateMachine is a SnapshotViewer: the state is encoded and
	// written (streamed, with a SnapshotStorage) while the handler goes
	// on; and restores a leader's snapshot off it when the StateMachine
	// is a BackgroundRestorer (restore.go). Nil: a snapshot is taken in
	// Handle, step 4, and restored in step 3.
	Background Background
	// Logger logs failed compactions. Nil: nothing is logged.
	Logger *slog.Logger
	// Hooks are called as the Readies are handled.
	Hooks Hooks
	// MaxElectionProposalBytes bounds the entry data a candidate holds
	// (ProposeAtElection): all of it is proposed at once if it wins, and
	// written in its first Ready as leader, so Node sets it to its
	// MaxEntryBytesPerBatch, which bounds every other write the same way.
	// Past it a proposal is refused with ErrNotElected; the first one is
	// always held, however large. 0 means no bound but the count.
	MaxElectionProposalBytes uint64
	// Yield, if set, is called in step 0 of a Ready that writes no
	// entries (a commit index moved), once its committed entries are
	// applied, when that answered from 1 to YieldAnswersMax proposers
	// waiting on this node, and before the Ready's messages are sent and
	// its hard state written. Node's gives its processor up for a moment
	// (Node.yield). The handler itself reads no clock and starts no
	// goroutine: what Yield does is the caller's.
	Yield func()
}

// YieldAnswersMax is the most proposers answered in one Ready for which
// the handler calls HandlerConfig.Yield: its point is a few clients'
// latency; with many answered at once the loop's next batch matters more
// than the moment each answer leaves.
const YieldAnswersMax = 4

// Handler is not safe for concurrent use; one goroutine owns it (Node's
// loop, or a simulator's).
//
// Handler drives one raft core through the Ready contract (see the package
// doc): for each raft.Ready it persists to the Storage, sends through the
// Transport, applies to the StateMachine, records the membership changes
// the core worked out, answers the proposals and reads waiting on this
// node, advances the core and compacts the log. It is step-driven: it has
// no goroutine and reads no clock. Its caller feeds it ticks (Tick),
// messages (Step) and requests (Propose, ReadIndex, or the core's own
// methods through Core), and calls Handle after each. Node runs it on its
// loop goroutine with a ticker; the simulator (coord/sim) and the
// transcripts (coord/raft/rafttest) drive the very same code with their
// simulated clocks, networks and crashable storage.
//
// # Order
//
// For every Ready, Handle does, on the caller's goroutine:
//
//  0. Transport.Send of the leader's requests (appends, heartbeats,
//     snapshots, TimeoutNow), and of the read-index requests and answers
//     and heartbeat answers, when the Ready changes neither the term nor
//     the vote: they vouch for nothing that step 1 writes, so the
//     leader's own disk write overlaps the network and the followers'
//     writes (dissertation §10.2.1), and a read's round of messages
//     waits for no fsync (the read itself is released in step 3, after
//     the Ready's write, like the reads this node confirms).
//     Then, unless the Ready carries a snapshot, step 3's application of
//     the committed entries and the answers to their proposers: a
//     committed entry is durable on a quorum already (the leader counted
//     its own copy only once written), so it need not wait for the fsync
//     of the entries proposed since, which this Ready writes. In a
//     Ready with no entries to write (a commit index moved: one
//     client's write, committed) this comes before the sending: the
//     answers are what a client waits for, the messages (the new commit
//     index, for the followers) are not, and HandlerConfig.Yield, if
//     set, is called between the two when a few proposers were answered;
//     with entries, the appends go
//     first, as the followers' writes are the longer path. The core
//     counts the leader's copy of
//     the entries towards a quorum only at step 4 (Core.Advance), once
//     they are durable. A candidate's vote requests of the term and vote
//     for itself that step 1 writes go ahead too: the voters write their
//     votes while it writes its own, and it counts no vote before its own
//     is durable, because it steps no answer before this Handle returns
//     (see canSendAhead);
//  1. Storage.ApplySnapshot (if any), then Storage.Save(HardState,
//     Entries, MustSync), durable when it returns unless MustSync is
//     false (a commit index alone, which a crash may lose); then
//     Hooks.Persisted;
//  2. Transport.Send of the other messages: only now, because a granted
//     vote or an append acknowledgement promises what step 1 made
//     durable (Raft Figure 2: "respond after updating stable storage");
//  3. StateMachine.Restore (snapshot; or decoded in the background and
//     swapped in before the rest of this step: restore.go), then, for each committed entry in
//     log order (unless step 0 applied them), StateMachine.Apply (normal entries with data) or the
//     recording of the membership the core handed over
//     (Ready.ConfChanges; never worked out again); the proposer waiting
//     for the entry is answered; confirmed reads are answered once
//     applied through their index; reads pending on a leader that lost
//     its leadership fail, and so do the reads the core dropped
//     (Ready.DroppedReads: a follower's leader changed or refused);
//  4. Core.Advance, then a snapshot and log compaction once
//     SnapshotEntries entries, or SnapshotBytes of entry data, were
//     applied since the last.
//
// # When the storage fails
//
// If step 1 fails, the handler holds the Ready: none of its messages are
// sent but those of step 0, and none of its entries applied but the
// committed ones of step 0, and Handle returns the error
// wrapped in ErrStorage. While it holds a Ready it takes no messages (Step
// refuses them, as a partitioned node would hear nothing), no ticks, and
// refuses proposals and reads with ErrStorage. The caller must keep calling
// Tick: on every tick the handler repairs the storage (Repairer) and
// writes the held Ready again; once that works, it does steps 2 to 4 of
// that Ready as if the write had been slow, and goes on. The caller must
// not stop on such an error (a full disk drains), only report it. A failed
// compaction is logged and retried later, with back-off in ticks; the log
// just grows meanwhile. Any other error Handle or Tick returns (the state
// machine could not restore a snapshot) stopped the handler: the node
// cannot go on.
//
// # Stopping
//
// Stop ends the handler (a node stopped, or crashed in a simulation, even
// from inside a hook or a storage call): every waiter hears the error, the
// Ready in progress goes no further, and every later call returns it.
type Handler struct {
	id              uint64
	core            *raft.Core
	storage         Storage
	transport       Transport
	sm              StateMachine
	hooks           Hooks
	yield           func()
	log             *slog.Logger
	snapshotEntries uint64
	snapshotBytes   uint64
	snapshotPercent uint64
	rand            raft.Rand
	background      Background
	snapshotting    bool // a snapshot is being written in the background
	// restoring says a snapshot from the leader is being decoded in the
	// background; parked is the rest of its Ready (restore.go).
	restoring bool
	parked    raft.Ready

	// ready is the Ready being handled, kept here rather than allocated
	// for each; held says its persistence failed, and it waits for a
	// retry.
	ready   pendingReady
	held    bool
	stopped error // why the handler was stopped; nil while it runs
	// durableTerm is the term as of the last hard state persisted: a
	// leader's request of that term vouches for nothing unpersisted.
	durableTerm uint64

	// answered counts the proposers answered since the last Ready began
	// (HandlerConfig.Yield).
	answered int

	// batchBytes is the entry data taken (proposed, or stepped in a peer's
	// message) since the last Handle began: about what the next Ready
	// writes (Node bounds it).
	batchBytes uint64

	ticks        uint64 // ticks seen: the clock of the retries
	compactAfter uint64 // no compaction before this tick (after a failure)
	compactWait  uint64 // ticks to wait after the next failure

	applied      uint64
	appliedTerm  uint64 // the term of the last entry (or snapshot) applied
	lastSnapshot uint64
	// bytesSince is the entry data applied since the last snapshot was
	// taken (SnapshotBytes); bytesTaken, the part of it that the snapshot
	// being written covers, counted again if that snapshot fails.
	bytesSince, bytesTaken uint64
	// logBytesMin is the entry data to apply since the last snapshot
	// before the next (SnapshotLogPercent of its size, with its share
	// drawn); 0 without SnapshotLogPercent.
	logBytesMin uint64
	conf        raft.ConfState // the membership as of applied
	leading     bool

	// proposals holds the callers waiting for their entry, in index order
	// (and, at one index, in the order they proposed). One index may have
	// several: a deposed leader's caller, whose entry was truncated, and a
	// later one's, after this node leads again and appends a new entry
	// there. Every index is above applied: a proposal's entry is appended
	// after the last, and the waiters at an index leave when it is applied.
	proposals []proposalWaiter
	forwards  map[uint64]ForwardWaiter // by ticket, until the core says where they went
	reads     map[uint64]Waiter        // by read ID, until the core confirms them
	readQueue []pendingRead            // confirmed, until applied through their index
	// atElection holds the proposals a candidate takes until its election
	// ends (ProposeAtElection, elected.go), atElectionBytes their entry
	// data; electionTicks bounds the wait, maxElectionBytes the data.
	atElection       []electionProposal
	atElectionBytes  uint64
	electionTicks    int
	maxElectionBytes uint64
}

// pendingReady is a Ready on its way to being durable.
type pendingReady struct {
	rd           raft.Ready
	unsent       []raft.Message // rd.Messages not sent ahead (step 0)
	snapshotDone bool           // rd.Snapshot is durable; only the Save is left
	applied      bool           // rd.CommittedEntries were applied ahead (step 0)
	err          error          // why the last attempt failed
}

type proposalWaiter struct {
	index, term uint64
	done        Waiter
}

type pendingRead struct {
	index uint64
	done  Waiter
}

// NewHandler restores the state machine from the storage's snapshot and
// starts the core.
func NewHandler(cfg HandlerConfig) (*Handler, error) {
	switch {
	case cfg.Storage == nil:
		return nil, fmt.Errorf("%w: Storage is nil", ErrInvalidConfig)
	case cfg.Transport == nil:
		return nil, fmt.Errorf("%w: Transport is nil", ErrInvalidConfig)
	case cfg.StateMachine == nil:
		return nil, fmt.Errorf("%w: StateMachine is nil", ErrInvalidConfig)
	}
	h := &Handler{
		id:              cfg.Raft.ID,
		storage:         cfg.Storage,
		transport:       cfg.Transport,
		sm:              cfg.StateMachine,
		hooks:           cfg.Hooks,
		yield:           cfg.Yield,
		log:             cfg.Logger,
		snapshotEntries: cfg.SnapshotEntries,
		snapshotBytes:   cfg.SnapshotBytes,
		snapshotPercent: cfg.SnapshotLogPercent,
		rand:            cfg.Raft.Rand,
		background:      cfg.Background,
		reads:           map[uint64]Waiter{},
		forwards:        map[uint64]ForwardWaiter{},
		electionTicks:   cfg.Raft.ElectionTicks,

		maxElectionBytes: cfg.MaxElectionProposalBytes,
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	snap, err := cfg.Storage.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("node %d: read snapshot: %w", h.id, err)
	}
	hs, _, err := cfg.Storage.InitialState()
	if err != nil {
		return nil, fmt.Errorf("node %d: read hard state: %w", h.id, err)
	}
	h.durableTerm = hs.Term
	if !snap.IsEmpty() {
		if err := restore(cfg.StateMachine, snap); err != nil {
			return nil, fmt.Errorf("node %d: restore snapshot %d: %w", h.id, snap.Metadata.Index, err)
		}
		h.applied, h.lastSnapshot, h.conf = snap.Metadata.Index, snap.Metadata.Index, snap.Metadata.ConfState
		h.appliedTerm = snap.Metadata.Term
		h.snapshotSizeIs(snap.Size())
	}
	rc := cfg.Raft
	rc.Storage = cfg.Storage
	if h.core, err = raft.New(rc); err != nil {
		return nil, fmt.Errorf("node %d: %w", h.id, err)
	}
	return h, nil
}

// Core returns the core. Calls that change it (Campaign,
// TransferLeadership, ReportUnreachable, ...) must be followed by Handle.
func (h *Handler) Core() *raft.Core { return h.core }

// Applied returns the index of the last entry (or snapshot) applied.
func (h *Handler) Applied() uint64 { return h.applied }

// Conf returns the membership as of the last entry applied.
func (h *Handler) Conf() raft.ConfState { return h.conf }

// BatchBytes returns the entry data taken since the last Handle began:
// proposed (Propose, Forward) or stepped (the entries of a peer's append
// or forwarded proposals), refused ones included; about what the next
// Ready writes. A caller that batches work between two Handles bounds it
// (Node's MaxEntryBytesPerBatch).
func (h *Handler) BatchBytes() uint64 { return h.batchBytes }

// Held reports whether the handler holds a Ready its storage did not take.
func (h *Handler) Held() bool { return h.held }

// StorageErr returns why the storage is failing, wrapping ErrStorage, or
// nil while no Ready is held.
func (h *Handler) StorageErr() error {
	if !h.held {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrStorage, h.ready.err)
}

// Tick is one tick of the caller's clock: the core's Tick, or, while a
// Ready is held, a repair of the storage and another attempt to write it.
// It returns that attempt's error (wrapping ErrStorage; the Ready stays
// held), or an error that stopped the handler.
func (h *Handler) Tick() error {
	if h.stopped != nil {
		return h.stopped
	}
	h.ticks++
	if !h.held {
		h.core.Tick()
		return nil
	}
	var err error
	if r, ok := h.storage.(Repairer); ok {
		err = r.Repair()
	}
	if err == nil {
		err = h.persist()
	}
	if h.stopped != nil {
		return h.stopped
	}
	if err != nil {
		h.ready.err = err
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	h.held = false
	return h.finish()
}

// Step hands a peer's message to the core. While a Ready is held the
// message is dropped and the error wraps ErrStorage; an error from the core
// (raft.ErrInvalidMessage) means the core refused it.
func (h *Handler) Step(m raft.Message) error {
	if h.stopped != nil {
		return h.stopped
	}
	if h.held {
		return h.StorageErr()
	}
	for _, e := range m.Entries {
		h.batchBytes += uint64(len(e.Data))
	}
	return h.core.Step(m)
}

// ReportPeerGone tells the core that peer id closed its connection to this
// node from its end (raft.Core.ReportPeerGone: a hint that the leader's
// process died); Handle must follow. While a Ready is held the hint is
// dropped, as messages are: a node that cannot persist must not campaign.
func (h *Handler) ReportPeerGone(id uint64) {
	if h.stopped != nil || h.held {
		return
	}
	h.core.ReportPeerGone(id)
}

// Propose proposes data and calls done once the entry is applied here
// (with the state machine's result) or can no longer be (see Result). An
// error means the proposal was refused and done will not be called.
func (h *Handler) Propose(data []byte, done Waiter) error {
	h.releaseOnceLeading()
	return h.propose(func() (uint64, uint64, error) {
		h.batchBytes += uint64(len(data))
		return h.core.Propose(data)
	}, done)
}

// ForwardWaiter hears what became of a proposal made with Forward. Its
// functions are optional, called on the handler's goroutine, and must not
// block.
type ForwardWaiter struct {
	// Placed is called once the leader appended the proposal, at index in
	// term; Done follows when this node applies that index (or cannot
	// tell: a snapshot covered it).
	Placed func(index, term uint64)
	// Done is called once, at the end. Result.Value is the state
	// machine's result if the entry applied here (nil if it applied
	// before the leader's answer came). Err is ErrProposalLost when
	// another entry committed at its index (never applied); a refusal
	// wrapping raft.ErrNotLeader or raft.ErrProposalDropped (appended
	// nowhere; raft.ForwardResult.Lead is in the message); one wrapping
	// raft.ErrForwardUnanswered (no answer came: it may or may not
	// apply); ErrOutcomeUnknown (a snapshot covered its index); or the
	// error the handler was stopped with.
	Done Waiter
}

// RefusedError is the Err of a forwarded proposal that was refused, and
// so appended nowhere (ForwardWaiter.Done): Lead is the node the refusing
// node named as the leader (raft.ForwardResult.Lead), Err wraps
// raft.ErrNotLeader or raft.ErrProposalDropped.
type RefusedError struct {
	Lead uint64
	Err  error
}

func (e *RefusedError) Error() string { return e.Err.Error() }

// Unwrap returns the core's refusal.
func (e *RefusedError) Unwrap() error { return e.Err }

// Forward proposes data from any role (raft.Core.Forward): a leader
// appends it, a follower sends it to its leader, who answers where it
// appended it or that it refused it; w hears which, and then how it ended
// (ForwardWaiter). An error means it was refused here and went nowhere,
// and w hears nothing.
func (h *Handler) Forward(data []byte, w ForwardWaiter) error {
	if h.stopped != nil {
		return h.stopped
	}
	if h.held {
		return h.StorageErr()
	}
	h.releaseOnceLeading()
	h.batchBytes += uint64(len(data))
	ticket, err := h.core.Forward(data)
	if err != nil {
		return err
	}
	if w.Done == nil {
		w.Done = func(Result) {}
	}
	h.forwards[ticket] = w
	return nil
}

// forwarded takes the core's word on forwarded proposals: a refused or
// unanswered one ends now; one the leader appended waits for its index,
// as a proposal of this node's own does, unless this node applied it
// already (the answer came late), when its term there tells.
func (h *Handler) forwarded(results []raft.ForwardResult) {
	for _, res := range results {
		w, ok := h.forwards[res.Ticket]
		if !ok {
			continue
		}
		delete(h.forwards, res.Ticket)
		switch {
		case errors.Is(res.Err, raft.ErrNotLeader), errors.Is(res.Err, raft.ErrProposalDropped):
			w.Done(Result{Err: &RefusedError{Lead: res.Lead, Err: res.Err}})
		case res.Err != nil:
			w.Done(Result{Err: res.Err})
		case res.Index > h.applied:
			if w.Placed != nil {
				w.Placed(res.Index, res.Term)
			}
			h.await(res.Index, res.Term, w.Done)
		default:
			term, err := h.storage.Term(res.Index)
			switch {
			case err != nil:
				w.Done(Result{Index: res.Index, Err: fmt.Errorf("%w: entry %d applied before the leader's answer, and its term is gone: %v", ErrOutcomeUnknown, res.Index, err)})
			case term == res.Term:
				w.Done(Result{Index: res.Index})
			default:
				w.Done(Result{Index: res.Index, Err: ErrProposalLost})
			}
		}
	}
}

// ProposeConfChange proposes a membership change; done is called as for
// Propose, with the new raft.ConfState as the value.
func (h *Handler) ProposeConfChange(cc raft.ConfChange, done Waiter) error {
	return h.propose(func() (uint64, uint64, error) { return h.core.ProposeConfChange(cc) }, done)
}

func (h *Handler) propose(submit func() (uint64, uint64, error), done Waiter) error {
	if h.stopped != nil {
		return h.stopped
	}
	if h.held {
		return h.StorageErr()
	}
	index, term, err := submit()
	if err != nil {
		return err
	}
	h.await(index, term, done)
	return nil
}

// await registers done to hear how the entry proposed at index in term
// ends: after every waiter at or below index (usually, at the end).
func (h *Handler) await(index, term uint64, done Waiter) {
	at := len(h.proposals)
	for at > 0 && h.proposals[at-1].index > index {
		at--
	}
	h.proposals = slices.Insert(h.proposals, at, proposalWaiter{index: index, term: term, done: done})
}

// ReadIndex starts a linearizable read (dissertation §6.4) under the
// caller's id, which must not be in use by another read of this handler,
// and calls done once this node applied through the index the leader
// confirmed, or when the read fails. On a follower the core asks the
// leader for the index (MsgReadIndexRequest); a read the core drops fails
// with an error wrapping raft.ErrNotLeader.
func (h *Handler) ReadIndex(id uint64, done Waiter) error {
	if h.stopped != nil {
		return h.stopped
	}
	if h.held {
		return h.StorageErr()
	}
	if _, ok := h.reads[id]; ok {
		return fmt.Errorf("node %d: read %d is already pending", h.id, id)
	}
	if err := h.core.ReadIndex(id); err != nil {
		return err
	}
	h.reads[id] = done
	return nil
}

// Handle does the work of every Ready the core has, in the order of the
// type's doc. It returns nil when there is no more work; an error wrapping
// ErrStorage when a Ready's write failed and the Ready is now held (the
// caller goes on ticking); any other error stopped the handler.
func (h *Handler) Handle() error {
	if h.stopped == nil && !h.held {
		h.releaseElectionProposals()
	}
	// After the release: what it proposed goes in this Handle's write, not
	// in the next batch the loop takes.
	h.batchBytes = 0
	for h.stopped == nil && !h.held && !h.restoring && h.core.HasReady() {
		h.ready = pendingReady{rd: h.core.Ready()}
		if len(h.ready.rd.Entries) == 0 {
			// Nothing to write but a commit index, maybe: answer the
			// proposers first (step 0).
			h.answered = 0
			h.applyAhead()
			if h.yield != nil && h.stopped == nil && h.answered > 0 && h.answered <= YieldAnswersMax {
				h.yield()
			}
			if h.stopped == nil {
				h.sendAhead()
			}
		} else {
			h.sendAhead()
			h.applyAhead()
		}
		if h.stopped != nil {
			break
		}
		if err := h.persist(); err != nil {
			if h.stopped != nil {
				break
			}
			h.ready.err = err
			h.held = true
			return fmt.Errorf("%w: %w", ErrStorage, err)
		}
		if err := h.finish(); err != nil {
			return err
		}
	}
	return h.stopped
}

// Stop fails every waiting proposal and read with err (ErrStopped if nil)
// and makes every later call return it. A Handle in progress (one whose
// hook or storage stopped it) returns without doing more.
func (h *Handler) Stop(err error) {
	if h.stopped != nil {
		return
	}
	if err == nil {
		err = ErrStopped
	}
	h.stopped = err
	proposals := h.proposals
	h.proposals = nil
	for _, w := range proposals {
		w.done(Result{Index: w.index, Err: err})
	}
	for _, ticket := range slices.Sorted(maps.Keys(h.forwards)) {
		h.forwards[ticket].Done(Result{Err: err})
	}
	clear(h.forwards)
	h.failElectionProposals(err)
	h.failReads(err)
}

// sendAhead sends the Ready's messages that need not wait for its
// persistence (step 0), and leaves the others in h.ready.unsent.
func (h *Handler) sendAhead() {
	rd := &h.ready.rd
	h.ready.unsent = rd.Messages
	if len(rd.Messages) == 0 || !rd.Snapshot.IsEmpty() {
		return
	}
	ahead := 0
	for _, m := range rd.Messages {
		if h.canSendAhead(m, rd.HardState) {
			ahead++
		}
	}
	switch ahead {
	case 0:
		return
	case len(rd.Messages):
		h.transport.Send(rd.Messages)
		h.ready.unsent = nil
		return
	}
	early := make([]raft.Message, 0, ahead)
	later := make([]raft.Message, 0, len(rd.Messages)-ahead)
	for _, m := range rd.Messages {
		if h.canSendAhead(m, rd.HardState) {
			early = append(early, m)
		} else {
			later = append(later, m)
		}
	}
	h.transport.Send(early)
	h.ready.unsent = later
}

// canSendAhead reports whether m may leave before its Ready, whose hard
// state is hs, is persisted.
//
// A leader's request in the term already durable, in a Ready that does not
// change the term, may: it carries the leader's entries and commit index,
// which promise nothing about the leader's own disk (the core counts the
// leader's copy only once it is persisted, at Advance). So may a
// follower's forwarded proposals, in such a Ready. Responses and granted
// votes wait: they promise what the Ready writes (Raft Figure 2). So does
// anything of a term not yet durable (a learner that heard a term this
// node then forgot could get two different entries at one index and term),
// but one thing.
//
// The read-index messages and heartbeat answers of a durable term go ahead
// too (etcd's leader sends MsgReadIndexResp without waiting for its disk):
// a read index is a commit index, durable on a quorum that counted this
// node's copy only once it was written; a heartbeat answer and a read index
// request carry nothing but the term and a read round, and promise nothing
// about the log. Holding them behind an fsync only delays reads.
//
// A candidate's vote request of the term and vote for itself that hs
// writes may leave before hs is durable: it promises nothing about this
// node's disk. The voters write their votes while the candidate writes
// its own, instead of after it (a campaign waited for two disk writes in a
// row, one per side). It is safe because the candidate counts no vote
// before its own is durable: it steps no answer before this Handle
// returns, and a Handle whose write failed holds the Ready and refuses
// every message until the write is done (Step). If it crashes before the
// write, it never led in that term, and its restarted self holds no vote
// in the term and may vote once in it, as any node that voted for no one;
// the votes it was granted are those of a candidate that never won. The
// request's log position may name entries this Ready writes too: a voter
// compares, and a candidate that loses them in a crash does not win with
// them. docs/raft.md lists this among coord's divergences.
func (h *Handler) canSendAhead(m raft.Message, hs raft.HardState) bool {
	termChanges := !hs.IsEmpty() && hs.Term != h.durableTerm
	switch m.Type {
	case raft.MsgAppendRequest, raft.MsgHeartbeatRequest, raft.MsgSnapshotRequest, raft.MsgTimeoutNow,
		raft.MsgReadIndexRequest, raft.MsgReadIndexResponse, raft.MsgHeartbeatResponse:
		return !termChanges && m.Term == h.durableTerm
	case raft.MsgProposalRequest:
		// A follower's forwarded proposals promise nothing about its
		// disk: the leader decides where they go.
		return !termChanges
	case raft.MsgVoteRequest:
		// Every message of a Ready is from this node (the core sets
		// From); the vote it writes must be its own, for this term.
		return !hs.IsEmpty() && hs.Term == m.Term && hs.Vote == h.id
	}
	return false
}

// applyAhead applies the Ready's committed entries before its write (step
// 0). A Ready with a snapshot has none (the core hands out no committed
// entry while a snapshot is pending: they follow it, in a later Ready),
// so nothing is applied ahead of a snapshot. A committed entry is
// durable on a quorum already: on a leader, one that counted its own copy
// only once written (at Advance); on a follower, one that may still be in
// this very Ready's write, which a crash can lose here but not in the
// cluster. So neither applying it nor answering its proposer needs this
// write, and at load they would otherwise wait for the fsync of the
// entries proposed since (etcd's server applies beside its WAL write too).
func (h *Handler) applyAhead() {
	rd := &h.ready.rd
	if len(rd.CommittedEntries) == 0 {
		return
	}
	h.applyCommitted(rd)
	h.ready.applied = true
}

// applyCommitted applies rd's committed entries (step 3, or step 0: see
// applyAhead), after telling the callers of Forward where their proposals
// went: a forwarded proposal placed at an index this Ready commits waits
// for it.
func (h *Handler) applyCommitted(rd *raft.Ready) {
	h.forwarded(rd.ForwardResults)
	h.apply(rd.CommittedEntries, rd.ConfChanges)
}

// persist makes the Ready's snapshot, hard state and entries durable.
func (h *Handler) persist() error {
	rd := &h.ready.rd
	if !rd.Snapshot.IsEmpty() && !h.ready.snapshotDone {
		if err := h.storage.ApplySnapshot(rd.Snapshot); err != nil {
			return fmt.Errorf("node %d: apply snapshot: %w", h.id, err)
		}
		h.ready.snapshotDone = true
	}
	if !rd.HardState.IsEmpty() || len(rd.Entries) > 0 {
		if err := h.storage.Save(rd.HardState, rd.Entries, rd.MustSync); err != nil {
			return fmt.Errorf("node %d: save: %w", h.id, err)
		}
		if !rd.HardState.IsEmpty() {
			h.durableTerm = rd.HardState.Term
		}
	}
	return nil
}

// finish does the rest of the Ready's work once it is durable: steps 2 to
// 4.
func (h *Handler) finish() error {
	rd, unsent, applied := h.ready.rd, h.ready.unsent, h.ready.applied
	h.ready = pendingReady{} // keeps nothing of it alive
	if h.hooks.Persisted != nil {
		h.hooks.Persisted(rd)
	}
	if h.stopped != nil {
		return h.stopped
	}
	// 2. Only now send the rest: they vouch for what was just saved.
	if len(unsent) > 0 {
		h.transport.Send(unsent)
	}
	// 3. Apply.
	if !rd.Snapshot.IsEmpty() {
		if h.restoreInBackground(rd) {
			// The rest of this Ready waits for the restored state
			// (restored, in restore.go).
			return nil
		}
		if err := h.installSnapshot(rd.Snapshot); err != nil {
			h.Stop(err)
			return err
		}
	}
	return h.applyAndAdvance(rd, applied)
}

// applyAndAdvance is the rest of step 3, and step 4, of rd: its
// committed entries applied (unless step 0 applied them ahead), its
// reads answered, the core advanced.
func (h *Handler) applyAndAdvance(rd raft.Ready, applied bool) error {
	if !applied {
		h.applyCommitted(&rd)
	}
	if h.stopped != nil {
		return h.stopped
	}
	h.confirmReads(rd.ReadStates)
	h.dropReads(rd.DroppedReads)
	if rd.SoftState != nil {
		wasLeading := h.leading
		h.leading = rd.SoftState.Role == raft.Leader
		if wasLeading && !h.leading {
			// The core drops reads pending on a deposed leader.
			h.failReads(fmt.Errorf("%w: leadership lost", raft.ErrNotLeader))
		}
	}
	// 4. Advance.
	h.core.Advance(rd)
	h.maybeCompact()
	return h.stopped
}

func (h *Handler) installSnapshot(s raft.Snapshot) error {
	if err := restore(h.sm, s); err != nil {
		return fmt.Errorf("node %d: restore snapshot %d: %w", h.id, s.Metadata.Index, err)
	}
	h.snapshotRestored(s)
	return nil
}

// snapshotRestored records that the state machine now holds snapshot s.
func (h *Handler) snapshotRestored(s raft.Snapshot) {
	h.applied, h.lastSnapshot, h.conf = s.Metadata.Index, s.Metadata.Index, s.Metadata.ConfState
	h.bytesSince, h.bytesTaken = 0, 0
	h.snapshotSizeIs(s.Size())
	// The entries the snapshot covers were never seen here: whether a
	// waiter's entry is among them is unknown.
	n := 0
	for n < len(h.proposals) && h.proposals[n].index <= h.applied {
		n++
	}
	h.answerFirst(n, func(w proposalWaiter) Result { return Result{Index: w.index, Err: ErrOutcomeUnknown} })
	h.appliedTermIs(s.Metadata.Index, s.Metadata.Term)
	if h.hooks.SnapshotInstalled != nil {
		h.hooks.SnapshotInstalled(s.Metadata)
	}
}

// apply applies committed entries in order, recording the membership
// changes among them as the core handed them over (changes is
// Ready.ConfChanges, in the same order), and answers their proposers.
func (h *Handler) apply(entries []raft.Entry, changes []raft.CommittedConfChange) {
	for _, e := range entries {
		if e.Index != h.applied+1 {
			assert.Fail("node %d: applying entry %d after %d", h.id, e.Index, h.applied)
		}
		var value any
		var change *raft.CommittedConfChange
		switch e.Type {
		case raft.EntryNormal:
			if len(e.Data) > 0 {
				value = h.sm.Apply(e.Index, e.Data)
			}
		case raft.EntryConfChange:
			if len(changes) > 0 && changes[0].Index == e.Index {
				change, changes = &changes[0], changes[1:]
				h.conf = change.Conf
			}
			value = h.conf // unchanged if the entry was a no-op
		}
		h.applied = e.Index
		h.bytesSince += uint64(len(e.Data))
		if h.hooks.Applied != nil {
			h.hooks.Applied(e)
		}
		if change != nil && h.hooks.ConfChanged != nil {
			h.hooks.ConfChanged(*change)
		}
		if h.stopped != nil {
			return
		}
		n := 0
		for n < len(h.proposals) && h.proposals[n].index == e.Index {
			n++
		}
		h.answerFirst(n, func(w proposalWaiter) Result {
			if w.term == e.Term {
				return Result{Index: e.Index, Value: value}
			}
			return Result{Index: e.Index, Err: ErrProposalLost}
		})
		h.appliedTermIs(e.Index, e.Term)
	}
	if len(changes) > 0 {
		assert.Fail("node %d: membership change at %d handed over without its entry", h.id, changes[0].Index)
	}
}

// appliedTermIs records that the entry at index, of term, is committed, and
// fails at once every waiter above it whose entry has an older term: terms
// never decrease along a log, so no leader's log can hold both, and every
// later leader's log holds the committed one (Raft §5.4, Leader
// Completeness). Without this, a waiter whose entry a new leader truncated
// would wait until something else was applied at its index, which in an
// idle cluster is never. The sweep runs once per new term applied.
func (h *Handler) appliedTermIs(index, term uint64) {
	if term <= h.appliedTerm {
		return
	}
	h.appliedTerm = term
	kept := h.proposals[:0]
	var lost []proposalWaiter
	for _, w := range h.proposals {
		if w.index > index && w.term < term {
			lost = append(lost, w)
		} else {
			kept = append(kept, w)
		}
	}
	clear(h.proposals[len(kept):])
	h.proposals = kept
	for _, w := range lost {
		w.done(Result{Index: w.index, Err: ErrProposalLost})
	}
}

// answerFirst removes the first n waiters and answers each with
// result(w). A Waiter may propose again: the waiters it adds go after.
func (h *Handler) answerFirst(n int, result func(w proposalWaiter) Result) {
	if n == 0 {
		return
	}
	first := h.proposals[:n:n]
	h.proposals = h.proposals[n:]
	h.answered += n
	for _, w := range first {
		w.done(result(w))
	}
	clear(first)
}

// confirmReads queues the reads the core confirmed and answers those
// applied through their index.
func (h *Handler) confirmReads(states []raft.ReadState) {
	for _, rs := range states {
		if done, ok := h.reads[rs.ID]; ok {
			delete(h.reads, rs.ID)
			h.readQueue = append(h.readQueue, pendingRead{index: rs.Index, done: done})
		}
	}
	if len(h.readQueue) == 0 {
		return
	}
	kept := h.readQueue[:0]
	for _, r := range h.readQueue {
		if r.index <= h.applied {
			r.done(Result{Index: r.index})
		} else {
			kept = append(kept, r)
		}
	}
	clear(h.readQueue[len(kept):])
	h.readQueue = kept
}

// dropReads fails the reads the core will never confirm: a follower's
// leader changed or refused, or a leader lost its leadership. The caller
// retries, on this node or another.
func (h *Handler) dropReads(ids []uint64) {
	for _, id := range ids {
		if done, ok := h.reads[id]; ok {
			delete(h.reads, id)
			done(Result{Err: fmt.Errorf("%w: read %d dropped: the leader changed or refused", raft.ErrNotLeader, id)})
		}
	}
}

func (h *Handler) failReads(err error) {
	for _, id := range slices.Sorted(maps.Keys(h.reads)) {
		h.reads[id](Result{Err: err})
	}
	clear(h.reads)
	for _, r := range h.readQueue {
		r.done(Result{Index: r.index, Err: err})
	}
	h.readQueue = nil
}

// Compaction retries back off from compactWaitMin to compactWaitMax ticks.
const (
	compactWaitMin = 10
	compactWaitMax = 600
)

// maybeCompact snapshots the state machine and compacts the log once
// SnapshotEntries entries, or SnapshotBytes of entry data, were applied
// since the last time, and, with SnapshotLogPercent, at least logBytesMin
// of entry data: in the background if
// it can (snapshot.go), else here. A failure (a full disk) is logged and
// retried later, with back-off: the log just grows meanwhile, and nothing
// is lost.
func (h *Handler) maybeCompact() {
	if h.snapshotEntries == 0 || h.snapshotting || h.restoring || h.ticks < h.compactAfter {
		return
	}
	// Due: the entry floor reached and, with SnapshotLogPercent, the log
	// that share of the last snapshot's size. Capped: SnapshotBytes of
	// log, which the Disk keeps in memory, whatever the percentage says.
	due := h.applied >= h.lastSnapshot+h.snapshotEntries && h.bytesSince >= h.logBytesMin
	capped := h.snapshotBytes != 0 && h.bytesSince >= h.snapshotBytes
	if !due && !capped {
		return
	}
	h.bytesTaken, h.bytesSince = h.bytesSince, 0
	if h.snapshotInBackground() {
		return
	}
	if err := h.Compact(); err != nil {
		h.compactFailed(err)
	}
}

// Compact snapshots the state machine as of the last applied entry and
// discards the log up to it.
func (h *Handler) Compact() error {
	if h.stopped != nil {
		return h.stopped
	}
	if h.restoring {
		return fmt.Errorf("node %d: %w", h.id, ErrRestoring)
	}
	data, err := h.sm.Snapshot()
	if err == nil {
		err = h.storage.Compact(h.applied, data, h.conf)
	}
	if err != nil {
		return fmt.Errorf("node %d: snapshot at %d: %w", h.id, h.applied, err)
	}
	h.bytesSince = 0 // called directly, not by maybeCompact, it counts too
	h.snapshotSizeIs(int64(len(data)))
	h.compacted(raft.SnapshotMetadata{Index: h.applied, Term: h.appliedTerm, ConfState: cloneConf(h.conf)})
	return nil
}

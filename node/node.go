package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"coord/raft"
	"coord/storage/vfs"
)

// Errors returned by a Node.
var (
	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("node: invalid config")
	// ErrStopped means the node was stopped.
	ErrStopped = errors.New("node: stopped")
	// ErrProposalLost means the proposal's entry can never commit:
	// leadership changed before it committed, and then either another
	// entry committed at its index or an entry of a later term committed
	// at or below it (terms only grow along a log, so no log holding that
	// entry can also hold the proposal's). It was not applied, and never
	// will be; retrying is safe.
	ErrProposalLost = errors.New("node: proposal lost to a leadership change")
	// ErrOutcomeUnknown means the node skipped the proposal's index by
	// installing a snapshot, so it cannot tell whether it was applied.
	ErrOutcomeUnknown = errors.New("node: proposal outcome unknown")
	// ErrStorage means the node's storage is failing (a full disk, an I/O
	// error): until a write succeeds again the node refuses proposals and
	// reads, and neither votes nor acknowledges appends. The error wraps
	// the storage's (vfs.IsNoSpace tells a full disk).
	ErrStorage = errors.New("node: storage failing")
)

// Repairer is implemented by a Storage that, after a failed write, refuses
// writes until repaired (raftstore.Disk). The node calls Repair before it
// retries the write.
type Repairer interface {
	// Repair makes the storage take writes again, forgetting whatever the
	// failed write left behind; an error means not yet (retry later).
	Repair() error
}

// StateMachine is the application replicated by Raft. The node calls it
// from its loop goroutine only, never concurrently.
type StateMachine interface {
	// Apply applies the data of a committed entry, in log order. Its
	// result is returned to the proposer, if it proposed on this node.
	Apply(index uint64, data []byte) any
	// Snapshot serializes the state as of the last applied entry.
	Snapshot() ([]byte, error)
	// Restore replaces the state with what Snapshot produced.
	Restore(data []byte) error
}

// Config configures a Node. Start from DefaultConfig.
type Config struct {
	// Raft configures the core: ID, Peers (for a new cluster), ticks and
	// limits. Storage is set from Storage; Rand, if nil, is seeded at
	// random.
	Raft         raft.Config
	Storage      Storage
	Transport    Transport
	StateMachine StateMachine
	// TickInterval is the wall-clock length of a raft tick.
	TickInterval time.Duration
	// SnapshotEntries is how many applied entries trigger a snapshot and
	// log compaction; 0 never compacts.
	SnapshotEntries uint64
	// InboxMessages bounds the messages waiting for the loop; Deliver
	// drops past it, as a full network buffer would.
	InboxMessages int
	// ConfChanged, if set, is called on the loop goroutine after a
	// membership change is applied (to update a transport's address book
	// from the change's Context, say). It must not block.
	ConfChanged func(cc raft.ConfChange, cs raft.ConfState)
	// Logger logs storage failures and dropped messages. Nil:
	// slog.Default().
	Logger *slog.Logger
	// InvalidMessage, if set, is called on the loop goroutine for each
	// peer message the core refused as one no correct peer sends
	// (raft.ErrInvalidMessage: a second leader in a term, from a duplicate
	// node ID, say), after it is logged. It must not block.
	InvalidMessage func(m raft.Message, err error)
}

// DefaultConfig returns a Config with 100 ms ticks (elections after 1-2 s),
// a snapshot every 10,000 entries and an inbox of 4096 messages.
func DefaultConfig() Config {
	return Config{
		Raft:            raft.DefaultConfig(),
		TickInterval:    100 * time.Millisecond,
		SnapshotEntries: 10000,
		InboxMessages:   4096,
	}
}

// Validate names the first field missing or out of range.
func (c Config) Validate() error {
	switch {
	case c.Storage == nil:
		return fmt.Errorf("%w: Storage is nil", ErrInvalidConfig)
	case c.Transport == nil:
		return fmt.Errorf("%w: Transport is nil", ErrInvalidConfig)
	case c.StateMachine == nil:
		return fmt.Errorf("%w: StateMachine is nil", ErrInvalidConfig)
	case c.TickInterval <= 0:
		return fmt.Errorf("%w: TickInterval %v must be positive", ErrInvalidConfig, c.TickInterval)
	case c.InboxMessages <= 0:
		return fmt.Errorf("%w: InboxMessages %d must be positive", ErrInvalidConfig, c.InboxMessages)
	}
	if err := c.coreConfig().Validate(); err != nil {
		return fmt.Errorf("%w: Raft: %w", ErrInvalidConfig, err)
	}
	return nil
}

// coreConfig returns the core's configuration: Raft with Storage set and,
// if Raft.Rand is nil, a randomly seeded source.
func (c Config) coreConfig() raft.Config {
	rc := c.Raft
	rc.Storage = c.Storage
	if rc.Rand == nil {
		rc.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return rc
}

// Node runs one raft core on its own goroutine.
//
// Node is safe for concurrent use: its methods talk to the loop goroutine
// by message, and the loop alone touches the core, the storage and the
// state machine (the articles' lesson: one owner, no shared state).
type Node struct {
	id       uint64
	cfg      Config
	log      *slog.Logger
	core     *raft.Core
	inbox    chan raft.Message
	reports  chan func()
	requests chan func()
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	err      error // set before done is closed

	// Owned by the loop goroutine.
	stuck        *stuckReady // a Ready whose persistence failed; nil while storage works
	ticks        uint64      // ticks seen, the clock of the retries
	compactAfter uint64      // no compaction before this tick (after a failure)
	compactWait  uint64      // ticks to wait after the next failure
	logLost      bool        // LogLost has been logged
	applied      uint64
	conf         raft.ConfState
	lastSnapshot uint64
	leading      bool
	readSeq      uint64
	reads        map[uint64]chan error
	readQueue    []pendingRead
	// proposals holds the callers waiting for their entry, by index. One
	// index may have several: a deposed leader's caller, whose entry was
	// truncated, and a later one's, after this node leads again and
	// appends a new entry there.
	proposals map[uint64][]waiter
	// appliedTerm is the term of the last entry (or snapshot) applied.
	appliedTerm uint64

	mu         sync.Mutex // guards status, storageErr and changed
	status     raft.Status
	storageErr error
	changed    chan struct{}
}

// stuckReady is a Ready that could not be made durable: the node holds it,
// sends none of its messages and applies none of its entries, and writes it
// again once the storage works.
type stuckReady struct {
	rd           raft.Ready
	snapshotDone bool // rd.Snapshot is durable; only the Save is left
	err          error
	since        time.Time
	attempts     int
}

type waiter struct {
	term uint64
	ch   chan result
}

type result struct {
	value any
	err   error
}

type pendingRead struct {
	index uint64
	ch    chan error
}

// Start restores the state machine from the storage's snapshot, starts the
// core and the loop goroutine.
func Start(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rc := cfg.coreConfig()
	n := &Node{
		id:        rc.ID,
		cfg:       cfg,
		log:       cfg.Logger,
		inbox:     make(chan raft.Message, cfg.InboxMessages),
		reports:   make(chan func(), 256),
		requests:  make(chan func()),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		proposals: map[uint64][]waiter{},
		reads:     map[uint64]chan error{},
		changed:   make(chan struct{}),
	}
	if n.log == nil {
		n.log = slog.Default()
	}
	snap, err := cfg.Storage.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("node %d: read snapshot: %w", n.id, err)
	}
	if !snap.IsEmpty() {
		if err := cfg.StateMachine.Restore(snap.Data); err != nil {
			return nil, fmt.Errorf("node %d: restore snapshot %d: %w", n.id, snap.Metadata.Index, err)
		}
		n.applied, n.lastSnapshot, n.conf = snap.Metadata.Index, snap.Metadata.Index, snap.Metadata.ConfState
	}
	n.core, err = raft.New(rc)
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", n.id, err)
	}
	n.publishStatus()
	go n.run()
	return n, nil
}

// ID returns the node's ID.
func (n *Node) ID() uint64 { return n.id }

// Deliver hands a message from a peer to the node. It never blocks: when
// the inbox is full the message is dropped, and Raft recovers as from any
// lost packet. Transports call it from their own goroutines.
func (n *Node) Deliver(m raft.Message) {
	select {
	case n.inbox <- m:
	default:
		n.log.Debug("node: inbox full, message dropped", "node", n.id, "message", m.String())
	}
}

// ReportUnreachable tells the leader that a message to id was dropped. It
// never blocks.
func (n *Node) ReportUnreachable(id uint64) {
	n.report(func() { n.core.ReportUnreachable(id) })
}

// ReportSnapshot tells the leader whether a snapshot reached id. It never
// blocks.
func (n *Node) ReportSnapshot(id uint64, failed bool) {
	n.report(func() { n.core.ReportSnapshot(id, failed) })
}

func (n *Node) report(f func()) {
	select {
	case n.reports <- f:
	default:
	}
}

// do runs f on the loop goroutine and waits until it has run.
func (n *Node) do(ctx context.Context, f func()) error {
	ran := make(chan struct{})
	select {
	case n.requests <- func() { f(); close(ran) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.done:
		return n.Err()
	}
	<-ran
	return nil
}

// Propose replicates data and waits until this node has applied it,
// returning the state machine's result. It fails with ErrNotLeader or
// ErrProposalDropped (raft) if the core refused the proposal; with
// ErrProposalLost if leadership changed and the entry can never commit;
// with ErrOutcomeUnknown if this node installed a snapshot past the entry
// and cannot tell; with ctx's error if ctx ends first (the outcome is then
// unknown too); with ErrStopped, or the error that ended the loop.
func (n *Node) Propose(ctx context.Context, data []byte) (any, error) {
	return n.propose(ctx, func() (uint64, uint64, error) { return n.core.Propose(data) })
}

// ProposeConfChange proposes a membership change and waits until it is
// applied here; the result is the new raft.ConfState.
func (n *Node) ProposeConfChange(ctx context.Context, cc raft.ConfChange) (raft.ConfState, error) {
	v, err := n.propose(ctx, func() (uint64, uint64, error) { return n.core.ProposeConfChange(cc) })
	if err != nil {
		return raft.ConfState{}, err
	}
	return v.(raft.ConfState), nil
}

func (n *Node) propose(ctx context.Context, submit func() (uint64, uint64, error)) (any, error) {
	ch := make(chan result, 1)
	err := n.do(ctx, func() {
		if n.stuck != nil {
			ch <- result{err: n.storageFailure()}
			return
		}
		index, term, err := submit()
		if err != nil {
			ch <- result{err: err}
			return
		}
		n.await(index, term, ch)
	})
	if err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r.value, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.done:
		return nil, n.Err()
	}
}

// await registers ch to hear how the entry proposed at index in term ends.
// An earlier waiter at the same index stays: its entry was truncated, and
// it is answered when the index, or an entry of a later term below it, is
// applied.
func (n *Node) await(index, term uint64, ch chan result) {
	n.proposals[index] = append(n.proposals[index], waiter{term: term, ch: ch})
}

// ReadIndex waits until a linearizable read may be served from this
// node's state machine (dissertation §6.4): the leader confirmed its
// leadership with a quorum, and this node applied through the commit index
// it had when the read began. Only the leader serves it (raft.ErrNotLeader
// elsewhere).
func (n *Node) ReadIndex(ctx context.Context) error {
	ch := make(chan error, 1)
	err := n.do(ctx, func() {
		if n.stuck != nil {
			ch <- n.storageFailure()
			return
		}
		n.readSeq++
		if err := n.core.ReadIndex(n.readSeq); err != nil {
			ch <- err
			return
		}
		n.reads[n.readSeq] = ch
	})
	if err != nil {
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.done:
		return n.Err()
	}
}

// TransferLeadership asks the leader to hand over to another voter
// (§3.10). It returns once the transfer has started.
func (n *Node) TransferLeadership(ctx context.Context, to uint64) error {
	var err error
	if doErr := n.do(ctx, func() { err = n.core.TransferLeadership(to) }); doErr != nil {
		return doErr
	}
	return err
}

// Campaign starts an election now.
func (n *Node) Campaign(ctx context.Context) error {
	return n.do(ctx, n.core.Campaign)
}

// Status returns the core's status as of the loop's last step.
func (n *Node) Status() raft.Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.status
}

// Changed returns a channel that is closed when the status next changes.
func (n *Node) Changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changed
}

// StorageError returns why the storage is failing, wrapping ErrStorage, or
// nil while it works. Changed is closed when it changes.
func (n *Node) StorageError() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.storageErr
}

// Done is closed when the loop has ended (Stop, or a failure of the state
// machine; a failing storage does not end it).
func (n *Node) Done() <-chan struct{} { return n.done }

// Err returns why the loop ended: ErrStopped after Stop, or the storage
// or state machine error that ended it. Nil while it runs.
func (n *Node) Err() error {
	select {
	case <-n.done:
		return n.err
	default:
		return nil
	}
}

// Stop ends the loop and waits for it. Waiting calls return ErrStopped.
// It returns the error that ended the loop, if not Stop itself.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() { close(n.stop) })
	<-n.done
	if errors.Is(n.err, ErrStopped) {
		return nil
	}
	return n.err
}

// ---- The loop ----

func (n *Node) run() {
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
			n.ticks++
			if n.stuck != nil {
				n.retryStorage()
			} else {
				n.core.Tick()
			}
		case m := <-n.inbox:
			if n.stuck == nil {
				n.step(m)
			}
			// else dropped: a node that cannot persist answers nothing,
			// as if partitioned; the peers retry.
		case f := <-n.requests:
			f()
		case f := <-n.reports:
			f()
		case <-n.stop:
			n.end(ErrStopped)
			return
		}
		if n.stuck != nil {
			n.publishStatus()
			continue
		}
		n.drain()
		if err := n.handleReadies(); err != nil {
			n.log.Error("node: stopping", "node", n.id, "err", err)
			n.end(err)
			return
		}
		n.publishStatus()
	}
}

// drainMax bounds the queued events one batch takes, so that ticks are not
// starved.
const drainMax = 512

// drain takes whatever else is queued (messages, requests, reports)
// without waiting, so that one Ready, and one fsync, covers all of it:
// proposals that arrived during the last fsync share the next one.
func (n *Node) drain() {
	for range drainMax {
		select {
		case m := <-n.inbox:
			n.step(m)
		case f := <-n.requests:
			f()
		case f := <-n.reports:
			f()
		default:
			return
		}
	}
}

// step feeds a peer's message to the core. A message no correct peer sends
// is logged and dropped: it must not stop the node.
func (n *Node) step(m raft.Message) {
	if err := n.core.Step(m); err != nil {
		n.log.Warn("node: invalid message", "node", n.id, "err", err)
		if n.cfg.InvalidMessage != nil {
			n.cfg.InvalidMessage(m, err)
		}
	}
}

// end fails every waiter with err and closes done.
func (n *Node) end(err error) {
	n.err = err
	for index, ws := range n.proposals {
		for _, w := range ws {
			w.ch <- result{err: err}
		}
		delete(n.proposals, index)
	}
	n.failReads(err)
	close(n.done)
}

func (n *Node) failReads(err error) {
	for id, ch := range n.reads {
		ch <- err
		delete(n.reads, id)
	}
	for _, r := range n.readQueue {
		r.ch <- err
	}
	n.readQueue = nil
}

// handleReadies does each Ready's work in the order of the package doc. A
// Ready that cannot be made durable is held (stuck) and retried on the
// following ticks; an error is returned only for what the node cannot go
// on after (the state machine failing).
func (n *Node) handleReadies() error {
	for n.core.HasReady() {
		rd := n.core.Ready()
		// 1. Persist, durably.
		stuck := &stuckReady{rd: rd}
		if err := n.persist(stuck); err != nil {
			stuck.err, stuck.since, stuck.attempts = err, time.Now(), 1
			n.stuck = stuck
			n.setStorageErr(err)
			n.log.Error("node: storage failed; not voting, acknowledging or accepting writes until a retry succeeds",
				"node", n.id, "err", err, "no_space", vfs.IsNoSpace(err))
			return nil
		}
		if err := n.finishReady(rd); err != nil {
			return err
		}
	}
	return nil
}

// persist makes the Ready's snapshot, hard state and entries durable.
func (n *Node) persist(s *stuckReady) error {
	rd := s.rd
	if !rd.Snapshot.IsEmpty() && !s.snapshotDone {
		if err := n.cfg.Storage.ApplySnapshot(rd.Snapshot); err != nil {
			return fmt.Errorf("node %d: apply snapshot: %w", n.id, err)
		}
		s.snapshotDone = true
	}
	if !rd.HardState.IsEmpty() || len(rd.Entries) > 0 {
		if err := n.cfg.Storage.Save(rd.HardState, rd.Entries); err != nil {
			return fmt.Errorf("node %d: save: %w", n.id, err)
		}
	}
	return nil
}

// storageFailure is the error for requests refused while the storage fails.
func (n *Node) storageFailure() error {
	return fmt.Errorf("%w: %w", ErrStorage, n.stuck.err)
}

func (n *Node) setStorageErr(err error) {
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrStorage, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.storageErr = err
	close(n.changed)
	n.changed = make(chan struct{})
}

// storageLogEvery is how many failed retries pass between two log lines
// saying the storage still fails.
const storageLogEvery = 600

// retryStorage runs on every tick while a Ready is stuck: it repairs the
// storage (if it can be) and writes the Ready again. Once that works, the
// Ready's messages go out and its entries apply, as if the write had been
// slow, and the node goes on.
func (n *Node) retryStorage() {
	s := n.stuck
	err := error(nil)
	if r, ok := n.cfg.Storage.(Repairer); ok {
		err = r.Repair()
	}
	if err == nil {
		err = n.persist(s)
	}
	if err != nil {
		s.attempts++
		s.err = err
		if s.attempts%storageLogEvery == 0 {
			n.log.Warn("node: storage still failing", "node", n.id, "since", s.since, "attempts", s.attempts, "err", err)
		}
		return
	}
	n.stuck = nil
	n.setStorageErr(nil)
	n.log.Info("node: storage works again; resuming", "node", n.id, "failed_for", time.Since(s.since).Round(time.Millisecond), "attempts", s.attempts)
	if err := n.finishReady(s.rd); err != nil {
		n.log.Error("node: stopping", "node", n.id, "err", err)
		n.end(err)
	}
}

// finishReady does the rest of a Ready's work once it is durable: send,
// apply, advance (steps 2 to 4 of the package doc).
func (n *Node) finishReady(rd raft.Ready) error {
	// 2. Only now send: the messages vouch for what was just saved.
	if len(rd.Messages) > 0 {
		n.cfg.Transport.Send(rd.Messages)
	}
	// 3. Apply.
	if !rd.Snapshot.IsEmpty() {
		if err := n.installSnapshot(rd.Snapshot); err != nil {
			return err
		}
	}
	n.apply(rd.CommittedEntries)
	for _, rs := range rd.ReadStates {
		if ch, ok := n.reads[rs.ID]; ok {
			delete(n.reads, rs.ID)
			n.readQueue = append(n.readQueue, pendingRead{index: rs.Index, ch: ch})
		}
	}
	n.releaseReads()
	if rd.SoftState != nil {
		wasLeading := n.leading
		n.leading = rd.SoftState.Role == raft.Leader
		if wasLeading && !n.leading {
			// The core drops reads pending on a deposed leader.
			n.failReads(fmt.Errorf("%w: leadership lost", raft.ErrNotLeader))
		}
	}
	// 4. Advance.
	n.core.Advance(rd)
	n.maybeCompact()
	return nil
}

func (n *Node) installSnapshot(s raft.Snapshot) error {
	if err := n.cfg.StateMachine.Restore(s.Data); err != nil {
		return fmt.Errorf("node %d: restore snapshot %d: %w", n.id, s.Metadata.Index, err)
	}
	n.applied, n.lastSnapshot, n.conf = s.Metadata.Index, s.Metadata.Index, s.Metadata.ConfState
	// The entries the snapshot covers were never seen here: whether a
	// waiter's entry is among them is unknown.
	for index, ws := range n.proposals {
		if index <= n.applied {
			for _, w := range ws {
				w.ch <- result{err: ErrOutcomeUnknown}
			}
			delete(n.proposals, index)
		}
	}
	n.appliedTermIs(s.Metadata.Index, s.Metadata.Term)
	return nil
}

func (n *Node) apply(entries []raft.Entry) {
	for _, e := range entries {
		var value any
		switch e.Type {
		case raft.EntryNormal:
			if len(e.Data) > 0 {
				value = n.cfg.StateMachine.Apply(e.Index, e.Data)
			}
		case raft.EntryConfChange:
			value = n.applyConfChange(e)
		}
		n.applied = e.Index
		for _, w := range n.proposals[e.Index] {
			if w.term == e.Term {
				w.ch <- result{value: value}
			} else {
				w.ch <- result{err: ErrProposalLost}
			}
		}
		delete(n.proposals, e.Index)
		n.appliedTermIs(e.Index, e.Term)
	}
}

// appliedTermIs records that the entry at index, of term, is committed, and
// fails at once every waiter above it whose entry has an older term: terms
// never decrease along a log, so no leader's log can hold both, and every
// later leader's log holds the committed one (Raft §5.4, Leader
// Completeness). Without this, a waiter whose entry a new leader truncated
// would wait until something else was applied at its index, which in an
// idle cluster is never. The sweep runs once per new term applied.
func (n *Node) appliedTermIs(index, term uint64) {
	if term <= n.appliedTerm {
		return
	}
	n.appliedTerm = term
	for i, ws := range n.proposals {
		if i <= index {
			continue
		}
		kept := ws[:0]
		for _, w := range ws {
			if w.term < term {
				w.ch <- result{err: ErrProposalLost}
			} else {
				kept = append(kept, w)
			}
		}
		if len(kept) == 0 {
			delete(n.proposals, i)
		} else {
			n.proposals[i] = kept
		}
	}
}

func (n *Node) applyConfChange(e raft.Entry) any {
	cc, err := raft.UnmarshalConfChange(e.Data)
	if err != nil {
		return n.conf
	}
	cs, err := raft.ApplyConfChange(n.conf, cc)
	if err != nil {
		return n.conf // a no-op on every node alike
	}
	n.conf = cs
	if n.cfg.ConfChanged != nil {
		n.cfg.ConfChanged(cc, cs)
	}
	return cs
}

func (n *Node) releaseReads() {
	kept := n.readQueue[:0]
	for _, r := range n.readQueue {
		if r.index <= n.applied {
			r.ch <- nil
		} else {
			kept = append(kept, r)
		}
	}
	n.readQueue = kept
}

// Compaction retries back off from compactWaitMin to compactWaitMax ticks.
const (
	compactWaitMin = 10
	compactWaitMax = 600
)

// maybeCompact snapshots the state machine and compacts the log once
// SnapshotEntries were applied since the last time. A failure (a full
// disk) is logged and retried later, with back-off: the log just grows
// meanwhile, and nothing is lost.
func (n *Node) maybeCompact() {
	if n.cfg.SnapshotEntries == 0 || n.applied < n.lastSnapshot+n.cfg.SnapshotEntries || n.ticks < n.compactAfter {
		return
	}
	data, err := n.cfg.StateMachine.Snapshot()
	if err == nil {
		err = n.cfg.Storage.Compact(n.applied, data, n.conf)
	}
	if err != nil {
		n.compactWait = min(max(2*n.compactWait, compactWaitMin), compactWaitMax)
		n.compactAfter = n.ticks + n.compactWait
		n.log.Warn("node: snapshot failed; will retry", "node", n.id, "index", n.applied, "retry_ticks", n.compactWait,
			"err", err, "no_space", vfs.IsNoSpace(err))
		return
	}
	n.compactWait = 0
	n.lastSnapshot = n.applied
}

func (n *Node) publishStatus() {
	st := n.core.Status()
	n.noteLogLost(st.LogLost)
	n.mu.Lock()
	defer n.mu.Unlock()
	if st.HardState == n.status.HardState && st.SoftState == n.status.SoftState &&
		st.Applied == n.status.Applied && st.LastIndex == n.status.LastIndex && st.Conf.Equal(n.status.Conf) {
		n.status = st
		return
	}
	n.status = st
	close(n.changed)
	n.changed = make(chan struct{})
}

// noteLogLost logs, once, that this node's log lost entries it had
// acknowledged (raft.LogLost), and once more if a leader repairs it.
func (n *Node) noteLogLost(lost *raft.LogLost) {
	switch {
	case lost != nil && !n.logLost:
		n.logLost = true
		n.log.Error("node: storage lost acknowledged log entries: this node's log ends at index "+
			fmt.Sprint(lost.LastIndex)+", but leader "+fmt.Sprint(lost.Leader)+" says entries up to "+fmt.Sprint(lost.Commit)+
			" are committed, which this node had acknowledged as durable. Its disk lost synced data. "+
			"It will not vote, campaign or apply past its log until a leader sends the lost entries again; "+
			"to replace it, remove it from the cluster and add it back with a new ID and an empty data directory",
			"node", n.id, "last_index", lost.LastIndex, "leader_commit", lost.Commit, "leader", lost.Leader, "term", lost.Term)
	case lost == nil && n.logLost:
		n.logLost = false
		n.log.Info("node: a leader sent the lost log entries again; voting and applying as before", "node", n.id)
	}
}

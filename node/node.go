package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
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
	// ErrRestoring means a snapshot from the leader is being restored in
	// the background: the node takes no snapshot of its own meanwhile.
	ErrRestoring = errors.New("node: restoring a snapshot")
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
// from its loop goroutine only, never concurrently; only the view a
// SnapshotViewer hands over is written on another goroutine.
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
	// SnapshotBytes, if not 0, also triggers one once this much entry
	// data was applied since the last, whatever SnapshotLogPercent says:
	// a cap on the log kept in memory (HandlerConfig.SnapshotBytes).
	SnapshotBytes uint64
	// SnapshotLogPercent, if not 0, holds a snapshot back until the entry
	// data applied since the last reaches this percentage of its size
	// (HandlerConfig.SnapshotLogPercent): the cost of snapshots per write
	// stays the same as the state grows.
	SnapshotLogPercent uint64
	// InboxMessages bounds the messages waiting for the loop; Deliver
	// drops past it, as a full network buffer would.
	InboxMessages int
	// MaxEntryBytesPerBatch bounds the entry data the loop takes into
	// one batch, which one Ready writes and fsyncs: its own proposals
	// (Propose, ProposeAsync, Forward) and the entries of the peers'
	// messages (a leader's appends, a follower's forwarded proposals).
	// Past it, the loop takes nothing more and writes; the rest waits for
	// its next round, with the ticks that came meanwhile. The loop
	// neither ticks nor steps while it writes, so a leader that took 64
	// proposals of 1 MB at once spent seconds in one write, sent no
	// heartbeat and no append, and its followers elected another leader;
	// a follower in such a write answers nothing, and its leader's check
	// of a quorum (raft.Config.CheckQuorum) steps it down. One message or
	// proposal is always taken, however large. 0 means no bound.
	MaxEntryBytesPerBatch uint64
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

// DefaultSnapshotBytes is the entry data applied between two snapshots
// in DefaultConfig: 128 MiB, which 10,000 entries of small writes never
// reach, and 128 writes of 1 MiB do.
const DefaultSnapshotBytes = 128 << 20

// DefaultSnapshotLogPercent is DefaultConfig's SnapshotLogPercent: a
// snapshot once the log since the last is a quarter of its size. The
// storage keeps that log in memory (raftstore.Disk), so the share is a
// trade: at 50 the snapshots cost half as much CPU per write, and the log
// adds up to 62% of the state to each node's memory instead of 31%. At
// 500,000 keys, 25 had the lower worst write and peak memory of 10, 25
// and 50 (docs/BENCHMARKS.md, "The snapshot trigger's share on a quiet
// machine").
const DefaultSnapshotLogPercent = 25

// DefaultConfig returns a Config with 100 ms ticks (elections after 1-2 s),
// a snapshot every 10,000 entries or 128 MiB of them, and no sooner than
// the log since the last is a quarter of its size (DefaultSnapshotLogPercent), an inbox of 4096 messages and batches
// of at most 4 MiB of entries.
func DefaultConfig() Config {
	return Config{
		Raft:                  raft.DefaultConfig(),
		TickInterval:          100 * time.Millisecond,
		SnapshotEntries:       10000,
		SnapshotBytes:         DefaultSnapshotBytes,
		SnapshotLogPercent:    DefaultSnapshotLogPercent,
		InboxMessages:         4096,
		MaxEntryBytesPerBatch: 4 << 20,
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
// by message, and the loop alone touches the Handler, and through it the
// core, the storage and the state machine (the articles' lesson: one owner,
// no shared state).
type Node struct {
	id       uint64
	cfg      Config
	log      *slog.Logger
	h        *Handler
	inbox    chan inboxItem
	reports  chan func()
	requests chan func()
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	err      error // set before done is closed

	// finished carries the end of background work to the loop: one
	// snapshot written and one snapshot restored at most are in progress
	// at a time, so its two slots never block a sender.
	finished   chan func()
	background sync.WaitGroup

	// Owned by the loop goroutine.
	readSeq   uint64
	logLost   bool      // LogLost has been logged
	heldSince time.Time // when the handler began to hold a Ready
	heldTries int       // writes of the held Ready tried

	// lead is status.Lead, for callers that want only that, without the
	// lock or the copy of the whole status (Lead).
	lead atomic.Uint64

	mu         sync.Mutex // guards status, storageErr, changed and roleChanged
	status     raft.Status
	storageErr error
	changed    chan struct{}
	// roleChanged is closed when the role, the leader or the term changes:
	// what a proposer waits on, without waking at every commit.
	roleChanged chan struct{}
}

// Start restores the state machine from the storage's snapshot, starts the
// core and the loop goroutine.
func Start(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rc := cfg.coreConfig()
	n := &Node{
		id:       rc.ID,
		cfg:      cfg,
		log:      cfg.Logger,
		inbox:    make(chan inboxItem, cfg.InboxMessages),
		reports:  make(chan func(), 256),
		requests: make(chan func()),
		finished: make(chan func(), 2),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		changed:  make(chan struct{}),

		roleChanged: make(chan struct{}),
	}
	if n.log == nil {
		n.log = slog.Default()
	}
	hc := HandlerConfig{
		Raft:            rc,
		Storage:         cfg.Storage,
		Transport:       cfg.Transport,
		StateMachine:    cfg.StateMachine,
		SnapshotEntries: cfg.SnapshotEntries,
		SnapshotBytes:   cfg.SnapshotBytes,
		Background:      n.runInBackground,
		Logger:          n.log,

		MaxElectionProposalBytes: cfg.MaxEntryBytesPerBatch,
		SnapshotLogPercent:       cfg.SnapshotLogPercent,
		Yield:                    yield,
	}
	if cfg.ConfChanged != nil {
		hc.Hooks.ConfChanged = func(c raft.CommittedConfChange) { cfg.ConfChanged(c.Change, c.Conf) }
	}
	h, err := NewHandler(hc)
	if err != nil {
		return nil, err
	}
	n.h = h
	n.publishStatus()
	go n.run()
	return n, nil
}

// yield is the handler's Yield: the loop gives its processor to the
// proposers it just answered, before it sends the Ready's messages (the
// new commit index, for the followers) and writes its hard state.
//
// Answering a proposer readies its goroutine on the loop's own processor
// (the Go scheduler's runnext), where it waits until the loop blocks, or
// until another processor, woken for it, steals it (it may only after a
// few µs, and a woken thread takes longer on a busy machine). Under one
// client the loop then still sent two messages and wrote the hard state,
// 15 to 400 µs (a loopback sendmsg runs the receiver's side too, and its
// thread may be descheduled there), before the goroutine that writes the
// client's answer ran (runtime trace of the leader, docs/BENCHMARKS.md,
// issue 15). runtime.Gosched puts the loop at the back of the global run
// queue and wakes an idle processor for it, so the answer goes out first
// and the loop goes on beside it when a processor is free.
func yield() { runtime.Gosched() }

// ID returns the node's ID.
func (n *Node) ID() uint64 { return n.id }

// Deliver hands a message from a peer to the node. It never blocks: when
// the inbox is full the message is dropped, and Raft recovers as from any
// lost packet. Transports call it from their own goroutines.
func (n *Node) Deliver(m raft.Message) {
	select {
	case n.inbox <- inboxItem{m: m}:
	default:
		n.log.Debug("node: inbox full, message dropped", "node", n.id, "message", m.String())
	}
}

// ReportUnreachable tells the leader that a message to id was dropped. It
// never blocks.
func (n *Node) ReportUnreachable(id uint64) {
	n.report(func() { n.h.Core().ReportUnreachable(id) })
}

// ReportSnapshot tells the leader whether a snapshot reached id. It never
// blocks.
func (n *Node) ReportSnapshot(id uint64, failed bool) {
	n.report(func() { n.h.Core().ReportSnapshot(id, failed) })
}

// ReportPeerGone tells the node that peer id closed its connection from
// its end (EOF or reset, not a timeout or a local error): if id is the
// leader, the node takes it as a hint that the leader's process died and
// campaigns at once (raft.Core.ReportPeerGone). It never blocks; if the
// inbox is full the hint is dropped, and the election timeout does its
// work.
//
// The hint goes through the inbox, behind the messages delivered before
// it: the messages a connection carried before its close are stepped
// before the close, as TCP delivers them. Taken the other way round, a
// heartbeat sent just before the leader died would make the node follow
// the dead leader again (the hint is taken once per leader and term), and
// the election would wait for the timeout.
func (n *Node) ReportPeerGone(id uint64) {
	select {
	case n.inbox <- inboxItem{gone: id}:
	default:
		n.log.Debug("node: inbox full, peer-gone hint dropped", "node", n.id, "peer", id)
	}
}

// inboxItem is a peer's message, or, if gone is set, the report that peer
// gone closed its connection.
type inboxItem struct {
	m    raft.Message
	gone uint64
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

// post hands f to the loop goroutine, which runs it next, without waiting
// for it to run: the caller goes on to wait for its answer at once,
// instead of being woken once more when f has run (a hand-off on every
// write's path, issue 15). Requests run in the order the loop took them.
func (n *Node) post(ctx context.Context, f func()) error {
	select {
	case n.requests <- f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.done:
		return n.Err()
	}
}

// Propose replicates data and waits until this node has applied it,
// returning the state machine's result. It fails with ErrNotLeader or
// ErrProposalDropped (raft) if the core refused the proposal; with
// ErrStorage while the storage fails; with ErrProposalLost if leadership
// changed and the entry can never commit; with ErrOutcomeUnknown if this
// node installed a snapshot past the entry and cannot tell; with ctx's
// error if ctx ends first (the outcome is then unknown too); with
// ErrStopped, or the error that ended the loop.
func (n *Node) Propose(ctx context.Context, data []byte) (any, error) {
	return n.wait(ctx, func(done Waiter) error { return n.h.Propose(data, done) })
}

// Forward proposes data from any role (Handler.Forward) and returns once
// the core took it: a leader appended it, a follower queued it for its
// leader. It does not wait for the entry: w hears, on the loop goroutine,
// where it went and how it ended (ForwardWaiter). It fails with
// raft.ErrNotLeader if no leader is known, ErrStorage while the storage
// fails, or ctx's error or ErrStopped if it never reached the loop; in all
// those cases the proposal went nowhere and w hears nothing.
func (n *Node) Forward(ctx context.Context, data []byte, w ForwardWaiter) error {
	var err error
	if doErr := n.do(ctx, func() { err = n.h.Forward(data, w) }); doErr != nil {
		return doErr
	}
	return err
}

// Forwarding is one proposal for ForwardEach. Its methods are called on
// the loop goroutine and must not block.
type Forwarding interface {
	// Take returns the proposal's data and waiter, or ok false if it is
	// no longer wanted: it is skipped then, and hears nothing.
	Take() (data []byte, w ForwardWaiter, ok bool)
	// Refused is called with the handler's error when it refused the
	// proposal here (raft.ErrNotLeader if no leader is known, ErrStorage
	// while the storage fails, the error the node stopped with): it went
	// nowhere, and its waiter hears nothing.
	Refused(err error)
}

// ForwardEach proposes the proposals of batch as Forward does, in order,
// in one turn of the loop, and returns how many of them the loop took: a
// caller that queues proposals from many goroutines hands them over with
// one wake-up of the loop, and none of theirs (Forward's caller waits for
// the loop, and is woken, once per proposal). The loop takes them while
// its batch holds less than MaxEntryBytesPerBatch of entry data, and the
// first one always, as it takes Forward's; the rest are the caller's to
// hand over again. It fails with ErrStopped, or the error that ended the
// loop, if the loop never took the batch; then none of it was taken, and
// nothing is called.
func (n *Node) ForwardEach(batch []Forwarding) (taken int, err error) {
	err = n.do(context.Background(), func() {
		limit := n.cfg.MaxEntryBytesPerBatch
		for i, f := range batch {
			if limit > 0 && i > 0 && n.h.BatchBytes() >= limit {
				taken = i
				return
			}
			data, w, ok := f.Take()
			if !ok {
				continue
			}
			if err := n.h.Forward(data, w); err != nil {
				f.Refused(err)
			}
		}
		taken = len(batch)
	})
	return taken, err
}

// Barrier returns once the loop has run every request it took before the
// call (ProposeAsync's, say, which returns once the loop took it, not
// once it ran): a refusal of such a proposal is on its channel by then.
func (n *Node) Barrier(ctx context.Context) error {
	return n.do(ctx, func() {})
}

// ProposeAsync is Propose without the wait: it returns once the loop has
// taken the proposal (it runs it next; Barrier waits until it has), with
// a channel that receives, once, how it ended
// (the Result of Propose's Waiter: Value the state machine's result, or
// Err). An error means the proposal was not taken (ctx ended first, or
// the loop ended); a refusal by the core comes on the channel. A server
// that waits for the result beside other events (a lost leadership) so
// needs no goroutine per proposal.
func (n *Node) ProposeAsync(ctx context.Context, data []byte) (<-chan Result, error) {
	return n.submitAsync(ctx, func(done Waiter) error { return n.h.Propose(data, done) })
}

// submitAsync has the loop call submit with a Waiter that sends to the
// channel it returns; submit's own error (a refusal) comes on the channel
// too. An error means the loop never took the call.
func (n *Node) submitAsync(ctx context.Context, submit func(Waiter) error) (<-chan Result, error) {
	ch := make(chan Result, 1)
	err := n.post(ctx, func() {
		if err := submit(func(r Result) { ch <- r }); err != nil {
			ch <- Result{Err: err}
		}
	})
	if err != nil {
		return nil, err
	}
	return ch, nil
}

// ProposeConfChange proposes a membership change and waits until it is
// applied here; the result is the new raft.ConfState.
func (n *Node) ProposeConfChange(ctx context.Context, cc raft.ConfChange) (raft.ConfState, error) {
	v, err := n.wait(ctx, func(done Waiter) error { return n.h.ProposeConfChange(cc, done) })
	if err != nil {
		return raft.ConfState{}, err
	}
	return v.(raft.ConfState), nil
}

// ReadIndex waits until a linearizable read may be served from this
// node's state machine (dissertation §6.4): the leader confirmed its
// leadership with a quorum, and this node applied through the commit index
// it had when the read began. A follower asks its leader for that index
// over the transport and waits until it has applied through it; a node
// that knows no leader, or whose leader changed or refused while the read
// waited, fails it with raft.ErrNotLeader, and the caller may retry.
func (n *Node) ReadIndex(ctx context.Context) error {
	_, err := n.wait(ctx, func(done Waiter) error {
		n.readSeq++
		return n.h.ReadIndex(n.readSeq, done)
	})
	return err
}

// wait submits a request on the loop goroutine and waits for its Waiter to
// be called.
func (n *Node) wait(ctx context.Context, submit func(Waiter) error) (any, error) {
	ch, err := n.submitAsync(ctx, submit)
	if err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r.Value, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.done:
		return nil, n.Err()
	}
}

// TransferLeadership asks the leader to hand over to another voter
// (§3.10). It returns once the transfer has started.
func (n *Node) TransferLeadership(ctx context.Context, to uint64) error {
	var err error
	if doErr := n.do(ctx, func() { err = n.h.Core().TransferLeadership(to) }); doErr != nil {
		return doErr
	}
	return err
}

// Campaign starts an election now.
func (n *Node) Campaign(ctx context.Context) error {
	return n.do(ctx, func() { n.h.Core().Campaign() })
}

// Status returns the core's status as of the loop's last step.
func (n *Node) Status() raft.Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.status
}

// Lead returns the leader as of the loop's last step (Status().Lead), 0 if
// none is known. It takes no lock: an HTTP server asks it on every request.
func (n *Node) Lead() uint64 { return n.lead.Load() }

// Changed returns a channel that is closed when the status next changes.
func (n *Node) Changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changed
}

// RoleChanged returns a channel that is closed when the role, the leader
// or the term next changes (Changed is closed then too, and at every other
// change). Waiting on it rather than Changed, a caller that watches for a
// lost leadership is not woken at every commit.
func (n *Node) RoleChanged() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.roleChanged
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

// run feeds the handler ticks, messages and requests, and has it handle the
// Readies after each batch. The handler does the Ready contract; the loop
// adds the clock, the inbox and the reports of a failing storage.
func (n *Node) run() {
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	for {
		var err error
		select {
		case <-ticker.C:
			err = n.tick()
		case it := <-n.inbox:
			n.step(it)
		case f := <-n.requests:
			f()
		case f := <-n.reports:
			f()
		case f := <-n.finished:
			f()
		case <-n.stop:
			n.end(ErrStopped)
			return
		}
		if err == nil && !n.h.Held() {
			n.drain()
			err = n.handle()
		}
		if err != nil {
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
//
// Once the batch holds MaxEntryBytesPerBatch of entries it takes nothing
// more: its write must stay short enough for the loop to tick (a leader's
// heartbeats) and step messages (a follower's answers, a leader's next
// appends) between two writes.
func (n *Node) drain() {
	for range drainMax {
		if limit := n.cfg.MaxEntryBytesPerBatch; limit > 0 && n.h.BatchBytes() >= limit {
			return
		}
		select {
		case it := <-n.inbox:
			n.step(it)
		case f := <-n.requests:
			f()
		case f := <-n.reports:
			f()
		default:
			return
		}
	}
}

// step feeds a peer's message, or a peer-gone hint, to the core. A message
// no correct peer sends is logged and dropped: it must not stop the node.
// While the storage fails the message is dropped: a node that cannot
// persist answers nothing, as if partitioned; the peers retry.
func (n *Node) step(it inboxItem) {
	if it.gone != 0 {
		n.h.ReportPeerGone(it.gone)
		return
	}
	m := it.m
	err := n.h.Step(m)
	if err == nil || errors.Is(err, ErrStorage) {
		return
	}
	n.log.Warn("node: invalid message", "node", n.id, "err", err)
	if n.cfg.InvalidMessage != nil {
		n.cfg.InvalidMessage(m, err)
	}
}

// handle has the handler do the Readies. A storage failure is reported
// and held (the handler retries on the following ticks); any other error
// is returned: the node cannot go on after it.
func (n *Node) handle() error {
	err := n.h.Handle()
	if !errors.Is(err, ErrStorage) {
		return err
	}
	n.heldSince, n.heldTries = time.Now(), 1
	n.setStorageErr(err)
	n.log.Error("node: storage failed; not voting, acknowledging or accepting writes until a retry succeeds",
		"node", n.id, "err", err, "no_space", vfs.IsNoSpace(err))
	return nil
}

// storageLogEvery is how many failed retries pass between two log lines
// saying the storage still fails.
const storageLogEvery = 600

// tick ticks the handler: the core's tick, or, while the storage fails,
// a retry of the held write. Once that works, the node goes on as if the
// write had been slow.
func (n *Node) tick() error {
	held := n.h.Held()
	err := n.h.Tick()
	if !held {
		return err
	}
	if errors.Is(err, ErrStorage) {
		n.heldTries++
		if n.heldTries%storageLogEvery == 0 {
			n.log.Warn("node: storage still failing", "node", n.id, "since", n.heldSince, "attempts", n.heldTries, "err", err)
		}
		return nil
	}
	n.setStorageErr(nil)
	n.log.Info("node: storage works again; resuming", "node", n.id,
		"failed_for", time.Since(n.heldSince).Round(time.Millisecond), "attempts", n.heldTries)
	return err
}

// end fails every waiter with err, waits for a snapshot being written in
// the background (so that the storage is not closed under it), and closes
// done.
func (n *Node) end(err error) {
	n.err = err
	n.h.Stop(err)
	n.background.Wait()
	close(n.done)
}

// runInBackground is the handler's Background: work runs on its own
// goroutine, and finish on the loop.
func (n *Node) runInBackground(work func() error, finish func(error)) {
	n.background.Add(1)
	go func() {
		defer n.background.Done()
		err := work()
		n.finished <- func() { finish(err) }
	}()
}

func (n *Node) setStorageErr(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.storageErr = err
	close(n.changed)
	n.changed = make(chan struct{})
}

func (n *Node) publishStatus() {
	st := n.h.Core().Status()
	n.noteLogLost(st.LogLost)
	n.lead.Store(st.Lead)
	n.mu.Lock()
	defer n.mu.Unlock()
	if st.HardState == n.status.HardState && st.SoftState == n.status.SoftState &&
		st.Applied == n.status.Applied && st.LastIndex == n.status.LastIndex && st.Conf.Equal(n.status.Conf) {
		n.status = st
		return
	}
	if st.SoftState != n.status.SoftState || st.Term != n.status.Term {
		close(n.roleChanged)
		n.roleChanged = make(chan struct{})
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

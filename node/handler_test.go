package node

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"coord/raft"
)

// recorder logs, in order, what a handler does to its storage, transport
// and state machine, and can make the storage fail.
type recorder struct {
	MemoryStorage
	events  []string
	sent    []raft.Message
	failing error // Save and ApplySnapshot fail with it while set
	repairs int
}

func (r *recorder) Save(hs raft.HardState, entries []raft.Entry, sync bool) error {
	if r.failing != nil {
		return r.failing
	}
	r.events = append(r.events, fmt.Sprintf("save term=%d vote=%d entries=%d", hs.Term, hs.Vote, len(entries)))
	return r.MemoryStorage.Save(hs, entries, sync)
}

func (r *recorder) Repair() error {
	r.repairs++
	return nil
}

func (r *recorder) Send(msgs []raft.Message) {
	for _, m := range msgs {
		r.events = append(r.events, "send "+m.Type.String())
	}
	r.sent = append(r.sent, msgs...)
}

// recordedMachine is the recorder's state machine.
type recordedMachine struct{ r *recorder }

func (m recordedMachine) Apply(index uint64, data []byte) any {
	m.r.events = append(m.r.events, fmt.Sprintf("apply %d %s", index, data))
	return string(data)
}

func (recordedMachine) Snapshot() ([]byte, error) { return nil, nil }
func (recordedMachine) Restore([]byte) error      { return nil }

// newRecordedHandler returns the handler of node 1 of a three-voter
// cluster, on a recorder, with the hooks that hooks returns.
func newRecordedHandler(t *testing.T, hooks func(*recorder) Hooks) (*Handler, *recorder) {
	t.Helper()
	return newRecordedHandlerWith(t, hooks, func(*HandlerConfig) {})
}

// newRecordedHandlerWith is newRecordedHandler with the configuration
// changed by configure.
func newRecordedHandlerWith(t *testing.T, hooks func(*recorder) Hooks, configure func(*HandlerConfig)) (*Handler, *recorder) {
	t.Helper()
	r := &recorder{MemoryStorage: NewMemoryStorage()}
	cfg := raft.DefaultConfig()
	cfg.ID = 1
	cfg.Peers = []uint64{1, 2, 3}
	cfg.Rand = rand.New(rand.NewPCG(1, 1))
	hc := HandlerConfig{Raft: cfg, Storage: r, Transport: r, StateMachine: recordedMachine{r}, Hooks: hooks(r)}
	configure(&hc)
	h, err := NewHandler(hc)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Handle(); err != nil {
		t.Fatal(err)
	}
	return h, r
}

// elect makes node 1 leader with votes from 2 and 3, and commits its
// empty entry with their acknowledgements.
func elect(t *testing.T, h *Handler, r *recorder) {
	t.Helper()
	h.Core().Campaign()
	mustHandle(t, h)
	mustStep(t, h, raft.Message{Type: raft.MsgPreVoteResponse, From: 2, To: 1, Term: h.Core().Status().Term + 1})
	mustStep(t, h, raft.Message{Type: raft.MsgVoteResponse, From: 2, To: 1, Term: h.Core().Status().Term})
	acknowledge(t, h)
	if st := h.Core().Status(); st.Role != raft.Leader || st.Commit != st.LastIndex {
		t.Fatalf("node 1 is %v with commit %d, last %d; want a leader with its entry committed", st.Role, st.Commit, st.LastIndex)
	}
}

// acknowledge has 2 and 3 acknowledge the leader's whole log.
func acknowledge(t *testing.T, h *Handler) {
	t.Helper()
	st := h.Core().Status()
	for _, from := range []uint64{2, 3} {
		mustStep(t, h, raft.Message{Type: raft.MsgAppendResponse, From: from, To: 1, Term: st.Term, LogIndex: st.LastIndex})
	}
}

func mustStep(t *testing.T, h *Handler, m raft.Message) {
	t.Helper()
	if err := h.Step(m); err != nil {
		t.Fatalf("Step(%v): %v", m, err)
	}
	mustHandle(t, h)
}

func mustHandle(t *testing.T, h *Handler) {
	t.Helper()
	if err := h.Handle(); err != nil {
		t.Fatal(err)
	}
}

// The Ready contract, step by step: a leader's appends go ahead of its own
// write, and so do its committed entries, applied (step 0; in a Ready with
// no entries to write, before the appends); a Ready's
// writes come before its other messages (a vote or an acknowledgement
// vouches for them); the hooks come at their places, and the proposer hears
// the state machine's result.
func TestHandlerKeepsTheReadyOrder(t *testing.T) {
	h, r := newRecordedHandler(t, func(r *recorder) Hooks {
		return Hooks{
			Persisted: func(rd raft.Ready) { r.events = append(r.events, "persisted") },
			Applied:   func(e raft.Entry) { r.events = append(r.events, fmt.Sprintf("applied %d", e.Index)) },
		}
	})
	elect(t, h, r)
	r.events = nil
	var got []Result
	if err := h.Propose([]byte("x=1"), func(res Result) { got = append(got, res) }); err != nil {
		t.Fatal(err)
	}
	mustHandle(t, h)
	acknowledge(t, h)
	want := []string{
		// The proposal: the appends that carry it, while its entry is
		// written.
		"send AppendRequest", "send AppendRequest", "save term=0 vote=0 entries=1", "persisted",
		// 2's acknowledgement commits it: the entry applied and its
		// proposer answered (committed, it needs no write here, and
		// the Ready has no entries, so the answer goes before the
		// messages), the appends that tell the commit index, then the
		// write of the commit index (3's changes nothing).
		"apply 3 x=1", "applied 3", "send AppendRequest", "send AppendRequest", "save term=2 vote=1 entries=0", "persisted",
	}
	if !slices.Equal(r.events, want) {
		t.Fatalf("events:\n  %s\nwant:\n  %s", strings.Join(r.events, "\n  "), strings.Join(want, "\n  "))
	}
	if len(got) != 1 || got[0].Value != "x=1" || got[0].Index != 3 || got[0].Err != nil {
		t.Fatalf("the proposer heard %+v, want the result of entry 3", got)
	}
}

// In a Ready that writes no entries (a commit index moved), the handler
// calls Yield once the proposers it answered are answered and before the
// commit index leaves and is written: Node gives the answered proposers'
// goroutines its processor there. Not with more than YieldAnswersMax
// answered, nor in a Ready that answers none.
func TestHandlerYieldsAfterAnsweringBeforeSendingTheCommit(t *testing.T) {
	h, r := newRecordedHandlerWith(t, func(*recorder) Hooks { return Hooks{} }, func(hc *HandlerConfig) {
		hc.Yield = func() { r := hc.Transport.(*recorder); r.events = append(r.events, "yield") }
	})
	elect(t, h, r)
	propose := func(n int) {
		for i := range n {
			data := fmt.Sprintf("x=%d", i)
			if err := h.Propose([]byte(data), func(Result) { r.events = append(r.events, "answered "+data) }); err != nil {
				t.Fatal(err)
			}
		}
		mustHandle(t, h)
	}

	r.events = nil
	propose(1)
	acknowledge(t, h)
	want := []string{
		"send AppendRequest", "send AppendRequest", "save term=0 vote=0 entries=1",
		"apply 3 x=0", "answered x=0", "yield", "send AppendRequest", "send AppendRequest", "save term=2 vote=1 entries=0",
	}
	if !slices.Equal(r.events, want) {
		t.Fatalf("one proposer, events:\n  %s\nwant:\n  %s", strings.Join(r.events, "\n  "), strings.Join(want, "\n  "))
	}

	r.events = nil
	propose(YieldAnswersMax + 1)
	acknowledge(t, h)
	if slices.Contains(r.events, "yield") {
		t.Fatalf("%d proposers answered in one Ready, events:\n  %s\nwant no yield", YieldAnswersMax+1, strings.Join(r.events, "\n  "))
	}
	if got := strings.Count(strings.Join(r.events, "\n"), "answered"); got != YieldAnswersMax+1 {
		t.Fatalf("%d proposers answered, want %d:\n  %s", got, YieldAnswersMax+1, strings.Join(r.events, "\n  "))
	}
}

// A write that fails holds the Ready: nothing of it is applied, nothing
// sent but the leader's appends that went ahead of the write (step 0),
// messages, proposals and reads are refused with ErrStorage, ticks go to
// repairing the storage and writing the Ready again; once that works, the
// node goes on (and the entry commits, now that the leader has it).
func TestHandlerHoldsAReadyItCouldNotWrite(t *testing.T) {
	h, r := newRecordedHandler(t, func(*recorder) Hooks { return Hooks{} })
	elect(t, h, r)
	r.sent, r.failing = nil, errors.New("disk on fire")
	var got []Result
	if err := h.Propose([]byte("x=1"), func(res Result) { got = append(got, res) }); err != nil {
		t.Fatal(err)
	}
	if err := h.Handle(); !errors.Is(err, ErrStorage) || !errors.Is(err, r.failing) {
		t.Fatalf("Handle with a failing storage: %v, want ErrStorage wrapping the cause", err)
	}
	if !h.Held() || len(r.sent) != 2 || r.sent[0].Type != raft.MsgAppendRequest || r.sent[1].Type != raft.MsgAppendRequest {
		t.Fatalf("held %v, sent %v: want the Ready held and only the appends sent ahead", h.Held(), r.sent)
	}
	// 2's acknowledgement is dropped: a held Ready takes no messages, and
	// the entry cannot commit while the leader's own copy is not written.
	if err := h.Step(raft.Message{Type: raft.MsgAppendResponse, From: 2, To: 1, Term: 2, LogIndex: 3}); !errors.Is(err, ErrStorage) {
		t.Errorf("Step while held: %v, want ErrStorage", err)
	}
	if len(got) != 0 {
		t.Fatalf("the proposal was answered while the leader's write failed: %+v", got)
	}
	if err := h.Step(raft.Message{Type: raft.MsgHeartbeatResponse, From: 2, To: 1, Term: 2}); !errors.Is(err, ErrStorage) {
		t.Errorf("Step while held: %v, want ErrStorage", err)
	}
	if err := h.Propose([]byte("y=1"), func(Result) {}); !errors.Is(err, ErrStorage) {
		t.Errorf("Propose while held: %v, want ErrStorage", err)
	}
	if err := h.ReadIndex(1, func(Result) {}); !errors.Is(err, ErrStorage) {
		t.Errorf("ReadIndex while held: %v, want ErrStorage", err)
	}
	term := h.Core().Status().Term
	for range 3 * raft.DefaultConfig().ElectionTicks {
		if err := h.Tick(); !errors.Is(err, ErrStorage) {
			t.Fatalf("Tick while the storage fails: %v, want ErrStorage", err)
		}
	}
	if r.repairs != 3*raft.DefaultConfig().ElectionTicks || len(r.sent) != 2 || h.Core().Status().Term != term {
		t.Fatalf("%d repairs, %d messages sent, term %d -> %d: want a repair per tick, no message, and no tick reaching the core",
			r.repairs, len(r.sent), term, h.Core().Status().Term)
	}
	r.failing = nil
	if err := h.Tick(); err != nil {
		t.Fatalf("Tick once the storage works: %v", err)
	}
	if h.Held() || h.StorageErr() != nil || len(r.sent) != 2 {
		t.Fatalf("held %v (%v), sent %v: want the Ready written and nothing more sent", h.Held(), h.StorageErr(), r.sent)
	}
	acknowledge(t, h)
	if len(got) != 1 || got[0].Err != nil || got[0].Value != "x=1" {
		t.Fatalf("the proposal made while the disk failed: %+v, want it applied", got)
	}
}

// Membership comes from the core: the handler records the change the core
// handed over, tells ConfChanged, and answers the proposer with the new
// membership.
func TestHandlerRecordsTheCoresMembership(t *testing.T) {
	var changes []raft.CommittedConfChange
	h, r := newRecordedHandler(t, func(*recorder) Hooks {
		return Hooks{ConfChanged: func(c raft.CommittedConfChange) { changes = append(changes, c) }}
	})
	if len(changes) != 1 || !slices.Equal(h.Conf().Voters, []uint64{1, 2, 3}) {
		t.Fatalf("after the bootstrap: changes %+v, conf %v", changes, h.Conf())
	}
	elect(t, h, r)
	var got []Result
	cc := raft.ConfChange{Changes: []raft.ConfChangeSingle{{Type: raft.ConfChangeAddLearner, NodeID: 4}}}
	if err := h.ProposeConfChange(cc, func(res Result) { got = append(got, res) }); err != nil {
		t.Fatal(err)
	}
	mustHandle(t, h)
	acknowledge(t, h)
	want := raft.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}
	if len(changes) != 2 || changes[1].Index != 3 || !changes[1].Conf.Equal(want) || !h.Conf().Equal(want) {
		t.Fatalf("changes %+v, conf %v; want the learner added at 3", changes, h.Conf())
	}
	if len(got) != 1 || got[0].Err != nil || !got[0].Value.(raft.ConfState).Equal(want) {
		t.Fatalf("the proposer heard %+v, want %v", got, want)
	}
}

// A hook may stop the handler (the simulator crashes a node so): the
// Ready in progress goes no further (nothing more is sent, beyond what
// went ahead of the write), waiters hear the error, and every later call
// returns it.
func TestHandlerStoppedByAHook(t *testing.T) {
	crashed := errors.New("crashed")
	var h *Handler
	sentAtStop := -1
	h, r := newRecordedHandler(t, func(r *recorder) Hooks {
		return Hooks{Persisted: func(rd raft.Ready) {
			if rd.SoftState != nil && rd.SoftState.Role == raft.Leader {
				h.Stop(crashed)
				sentAtStop = len(r.sent)
			}
		}}
	})
	var got []Result
	if err := h.ReadIndex(1, func(res Result) { got = append(got, res) }); !errors.Is(err, raft.ErrNotLeader) {
		t.Fatalf("ReadIndex on a follower: %v", err)
	}
	h.Core().Campaign()
	mustHandle(t, h)
	mustStep(t, h, raft.Message{Type: raft.MsgPreVoteResponse, From: 2, To: 1, Term: h.Core().Status().Term + 1})
	if err := h.Step(raft.Message{Type: raft.MsgVoteResponse, From: 2, To: 1, Term: h.Core().Status().Term}); err != nil {
		t.Fatal(err)
	}
	if err := h.Handle(); !errors.Is(err, crashed) {
		t.Fatalf("Handle when a hook stops the handler: %v, want its error", err)
	}
	if sentAtStop < 0 || len(r.sent) != sentAtStop {
		t.Fatalf("the stopped leader sent %v after it stopped", r.sent[max(sentAtStop, 0):])
	}
	if err := h.Propose([]byte("x"), func(res Result) { got = append(got, res) }); !errors.Is(err, crashed) {
		t.Errorf("Propose after Stop: %v", err)
	}
	if err := h.Tick(); !errors.Is(err, crashed) {
		t.Errorf("Tick after Stop: %v", err)
	}
	if err := h.Step(raft.Message{Type: raft.MsgHeartbeatResponse, From: 2, To: 1, Term: 2}); !errors.Is(err, crashed) {
		t.Errorf("Step after Stop: %v", err)
	}
	if len(got) != 0 {
		t.Errorf("refused requests were answered: %+v", got)
	}
}

// A leader's appends go ahead of its write only in a term already durable:
// a sole voter wins its election in the very Ready that raises its term,
// and its appends to a learner must wait for that term to be written (a
// leader that crashed and forgot the term could lead it again with other
// entries at the same indexes, and the learner would hold both).
func TestHandlerSendsAheadOnlyInADurableTerm(t *testing.T) {
	r := &recorder{MemoryStorage: NewMemoryStorage()}
	cfg := raft.DefaultConfig()
	cfg.ID = 1
	cfg.Peers = []uint64{1}
	cfg.Rand = rand.New(rand.NewPCG(1, 1))
	h, err := NewHandler(HandlerConfig{Raft: cfg, Storage: r, Transport: r, StateMachine: recordedMachine{r}})
	if err != nil {
		t.Fatal(err)
	}
	mustHandle(t, h)
	h.Core().Campaign()
	mustHandle(t, h)
	cc := raft.ConfChange{Changes: []raft.ConfChangeSingle{{Type: raft.ConfChangeAddLearner, NodeID: 2}}}
	if err := h.ProposeConfChange(cc, func(Result) {}); err != nil {
		t.Fatal(err)
	}
	mustHandle(t, h)
	// The learner reports a later term: the leader steps down, and wins
	// the next term alone.
	mustStep(t, h, raft.Message{Type: raft.MsgHeartbeatResponse, From: 2, To: 1, Term: 5})
	r.events = nil
	h.Core().Campaign()
	mustHandle(t, h)
	if st := h.Core().Status(); st.Role != raft.Leader || st.Term != 6 {
		t.Fatalf("node 1 is %v in term %d, want the leader of term 6", st.Role, st.Term)
	}
	save := slices.Index(r.events, "save term=6 vote=1 entries=1")
	send := slices.Index(r.events, "send AppendRequest")
	if save < 0 || send < 0 || send < save {
		t.Fatalf("events:\n  %s\nwant the term-6 appends sent after term 6 is saved", strings.Join(r.events, "\n  "))
	}
}

// A read index answer vouches for a commit index, durable on a quorum
// already: the leader sends it ahead of its own write, so a follower's read
// does not wait behind the leader's fsync of unrelated entries (here, a
// write that fails and holds the Ready).
func TestHandlerSendsReadIndexAnswersAheadOfItsWrite(t *testing.T) {
	h, r := newRecordedHandler(t, func(*recorder) Hooks { return Hooks{} })
	elect(t, h, r)
	st := h.Core().Status()
	r.sent = nil
	mustStep(t, h, raft.Message{Type: raft.MsgReadIndexRequest, From: 2, To: 1, Term: st.Term, ReadRound: 7})
	var round uint64
	for _, m := range r.sent {
		if m.Type == raft.MsgHeartbeatRequest && m.To == 2 {
			round = m.ReadRound
		}
	}
	if round == 0 {
		t.Fatalf("sent %v: want a heartbeat round for the read", r.sent)
	}
	// A proposal joins the Ready that the heartbeat answer completes, and
	// the write of its entry fails.
	if err := h.Propose([]byte("x=1"), func(Result) {}); err != nil {
		t.Fatal(err)
	}
	r.sent, r.failing = nil, errors.New("disk on fire")
	if err := h.Step(raft.Message{Type: raft.MsgHeartbeatResponse, From: 2, To: 1, Term: st.Term, ReadRound: round}); err != nil {
		t.Fatal(err)
	}
	if err := h.Handle(); !errors.Is(err, ErrStorage) {
		t.Fatalf("Handle with a failing storage: %v, want ErrStorage", err)
	}
	i := slices.IndexFunc(r.sent, func(m raft.Message) bool { return m.Type == raft.MsgReadIndexResponse })
	if i < 0 {
		t.Fatalf("sent %v while the write failed: want the read index answer sent ahead", r.sent)
	}
	if m := r.sent[i]; m.To != 2 || m.ReadRound != 7 || m.Reject || m.LogIndex != st.Commit {
		t.Fatalf("read index answer %+v, want round 7 with index %d to node 2", m, st.Commit)
	}
}

// A follower answers a heartbeat ahead of its write of the entries that came
// in the same Ready, but acknowledges the entries only once they are
// written.
func TestHandlerSendsHeartbeatAnswersAheadOfItsWrite(t *testing.T) {
	h, r := newRecordedHandler(t, func(*recorder) Hooks { return Hooks{} })
	// Node 2 leads term 1; node 1 takes its first entry, so term 1 is
	// durable.
	mustStep(t, h, raft.Message{Type: raft.MsgAppendRequest, From: 2, To: 1, Term: 1,
		Entries: []raft.Entry{{Term: 1, Index: 1}}, Commit: 0})
	r.sent, r.failing = nil, errors.New("disk on fire")
	if err := h.Step(raft.Message{Type: raft.MsgAppendRequest, From: 2, To: 1, Term: 1, LogIndex: 1, LogTerm: 1,
		Entries: []raft.Entry{{Term: 1, Index: 2, Data: []byte("x")}}, Commit: 1}); err != nil {
		t.Fatal(err)
	}
	if err := h.Step(raft.Message{Type: raft.MsgHeartbeatRequest, From: 2, To: 1, Term: 1, Commit: 1, ReadRound: 3}); err != nil {
		t.Fatal(err)
	}
	if err := h.Handle(); !errors.Is(err, ErrStorage) {
		t.Fatalf("Handle with a failing storage: %v, want ErrStorage", err)
	}
	if len(r.sent) != 1 || r.sent[0].Type != raft.MsgHeartbeatResponse || r.sent[0].ReadRound != 3 {
		t.Fatalf("sent %v while the write failed: want the heartbeat answer only", r.sent)
	}
}

// A committed entry is applied, and its proposer answered, ahead of the
// write of the entries proposed since: it is durable on a quorum already.
// Here that write fails and holds the Ready, and the proposer of the
// committed entry has its answer all the same; the new entry waits.
func TestHandlerAppliesCommittedEntriesAheadOfItsWrite(t *testing.T) {
	h, r := newRecordedHandler(t, func(*recorder) Hooks { return Hooks{} })
	elect(t, h, r)
	var first, second []Result
	if err := h.Propose([]byte("x=1"), func(res Result) { first = append(first, res) }); err != nil {
		t.Fatal(err)
	}
	mustHandle(t, h)
	if err := h.Propose([]byte("y=2"), func(res Result) { second = append(second, res) }); err != nil {
		t.Fatal(err)
	}
	// 2's acknowledgement of x=1 arrives with y=2 unwritten: one Ready
	// commits x=1 and writes y=2, and that write fails.
	r.failing = errors.New("disk on fire")
	st := h.Core().Status()
	if err := h.Step(raft.Message{Type: raft.MsgAppendResponse, From: 2, To: 1, Term: st.Term, LogIndex: 3}); err != nil {
		t.Fatal(err)
	}
	if err := h.Handle(); !errors.Is(err, ErrStorage) {
		t.Fatalf("Handle with a failing storage: %v, want ErrStorage", err)
	}
	if len(first) != 1 || first[0].Value != "x=1" || first[0].Err != nil {
		t.Fatalf("the proposer of the committed entry heard %+v while the next write failed, want its result", first)
	}
	if len(second) != 0 {
		t.Fatalf("the proposer of the unwritten entry heard %+v", second)
	}
	// Once the write works, the Ready goes on without applying x=1 twice
	// (apply asserts the order), and y=2 commits.
	r.failing = nil
	if err := h.Tick(); err != nil {
		t.Fatal(err)
	}
	acknowledge(t, h)
	if len(first) != 1 || len(second) != 1 || second[0].Value != "y=2" {
		t.Fatalf("after the write worked: first %+v, second %+v", first, second)
	}
}

// A candidate's vote requests leave ahead of the write of its own term and
// vote (the voters write theirs meanwhile), and a voter's grant only after
// its vote is written.
func TestHandlerSendsVoteRequestsAheadOfItsOwnVote(t *testing.T) {
	h, r := newRecordedHandler(t, func(*recorder) Hooks { return Hooks{} })
	term := h.Core().Status().Term
	// The leader of the term hands over (TimeoutNow): node 1 campaigns at
	// once, skipping pre-vote.
	mustStep(t, h, raft.Message{Type: raft.MsgHeartbeatRequest, From: 2, To: 1, Term: term + 1})
	r.events = nil
	mustStep(t, h, raft.Message{Type: raft.MsgTimeoutNow, From: 2, To: 1, Term: term + 1})
	save := slices.Index(r.events, fmt.Sprintf("save term=%d vote=1 entries=0", term+2))
	send := slices.Index(r.events, "send VoteRequest")
	if save < 0 || send < 0 || send > save {
		t.Fatalf("events:\n  %s\nwant the vote requests sent before the candidate's vote is saved", strings.Join(r.events, "\n  "))
	}
	// A voter: node 3 campaigns in a later term; node 1's grant waits for
	// its vote to be written.
	r.events = nil
	mustStep(t, h, raft.Message{Type: raft.MsgVoteRequest, From: 3, To: 1, Term: term + 3, LogIndex: 10, LogTerm: term + 3})
	save = slices.Index(r.events, fmt.Sprintf("save term=%d vote=3 entries=0", term+3))
	send = slices.Index(r.events, "send VoteResponse")
	if save < 0 || send < 0 || send < save {
		t.Fatalf("events:\n  %s\nwant the grant sent after the vote is saved", strings.Join(r.events, "\n  "))
	}
}

// A candidate whose own vote could not be written counts no vote: its
// requests went ahead, but while the write is held it steps no answer, so
// it cannot lead on a vote a crash would lose; once the write works it
// campaigns on as usual.
func TestHandlerCandidateCountsNoVoteBeforeItsOwnIsDurable(t *testing.T) {
	h, r := newRecordedHandler(t, func(*recorder) Hooks { return Hooks{} })
	term := h.Core().Status().Term
	mustStep(t, h, raft.Message{Type: raft.MsgHeartbeatRequest, From: 2, To: 1, Term: term + 1})
	r.failing = errors.New("disk on fire")
	if err := h.Step(raft.Message{Type: raft.MsgTimeoutNow, From: 2, To: 1, Term: term + 1}); err != nil {
		t.Fatal(err)
	}
	if err := h.Handle(); !errors.Is(err, ErrStorage) {
		t.Fatalf("Handle with a failing storage: %v, want ErrStorage", err)
	}
	requests := 0
	for _, m := range r.sent {
		if m.Type == raft.MsgVoteRequest && m.Term == term+2 {
			requests++
		}
	}
	if requests != 2 {
		t.Fatalf("sent %v: want the two vote requests of term %d sent ahead", r.sent, term+2)
	}
	grant := raft.Message{Type: raft.MsgVoteResponse, From: 3, To: 1, Term: term + 2}
	if err := h.Step(grant); !errors.Is(err, ErrStorage) {
		t.Fatalf("a grant stepped while the candidate's vote is not written: %v, want ErrStorage", err)
	}
	if st := h.Core().Status(); st.Role == raft.Leader {
		t.Fatalf("node 1 leads term %d on a vote not written", st.Term)
	}
	r.failing = nil
	if err := h.Tick(); err != nil {
		t.Fatalf("Tick once the storage works: %v", err)
	}
	mustStep(t, h, grant)
	if st := h.Core().Status(); st.Role != raft.Leader || st.Term != term+2 {
		t.Fatalf("node 1 is %v in term %d, want the leader of term %d once its vote is written", st.Role, st.Term, term+2)
	}
}

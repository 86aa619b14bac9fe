package node

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"coord/raft"
)

// restoringMachine is the recorder's state machine with a background
// restore: its state is a string, PrepareRestore decodes a snapshot
// ("state:..." is valid, anything else damaged) and install records the
// swap among the recorder's events.
type restoringMachine struct {
	r     *recorder
	state string
}

func (m *restoringMachine) Apply(index uint64, data []byte) any {
	m.r.events = append(m.r.events, fmt.Sprintf("apply %d %s", index, data))
	m.state += "+" + string(data)
	return nil
}
func (m *restoringMachine) Snapshot() ([]byte, error) { return []byte(m.state), nil }
func (m *restoringMachine) Restore(data []byte) error {
	install, err := m.PrepareRestore(strings.NewReader(string(data)), int64(len(data)))
	if err == nil {
		install()
	}
	return err
}

func (m *restoringMachine) PrepareRestore(r io.Reader, size int64) (func(), error) {
	data, err := io.ReadAll(io.LimitReader(r, size+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != size || !strings.HasPrefix(string(data), "state:") {
		return nil, fmt.Errorf("damaged snapshot %q", data)
	}
	return func() {
		m.r.events = append(m.r.events, "install "+string(data))
		m.state = string(data)
	}, nil
}

// backgroundRestore is a follower (node 2 of voters 1, 2, 3, joining with
// an empty log) whose Background work the test runs when it chooses.
type backgroundRestore struct {
	h      *Handler
	r      *recorder
	sm     *restoringMachine
	work   func() error
	finish func(error)
}

func newBackgroundRestore(t *testing.T, storage MemoryStorage) *backgroundRestore {
	t.Helper()
	b := &backgroundRestore{r: &recorder{MemoryStorage: storage}}
	b.sm = &restoringMachine{r: b.r, state: "empty"}
	cfg := raft.DefaultConfig()
	cfg.ID = 2
	cfg.Rand = rand.New(rand.NewPCG(2, 1))
	h, err := NewHandler(HandlerConfig{Raft: cfg, Storage: b.r, Transport: b.r, StateMachine: b.sm,
		Background: func(work func() error, finish func(error)) {
			if b.work != nil {
				t.Fatal("a second background job while one is pending")
			}
			b.work, b.finish = work, finish
		}})
	if err != nil {
		t.Fatal(err)
	}
	b.h = h
	return b
}

// runBackground runs the pending work and its end, as Node does: the work
// on any goroutine, the end on the handler's, then Handle.
func (b *backgroundRestore) runBackground() error {
	work, finish := b.work, b.finish
	b.work, b.finish = nil, nil
	finish(work())
	return b.h.Handle()
}

var snapshotConf = raft.ConfState{Voters: []uint64{1, 2, 3}}

// The leader's snapshot at 10 is decoded in the background. Meanwhile the
// follower steps the leader's appends (11, 12, committed) and heartbeats
// and ticks past its election timeout, and applies nothing, sends nothing
// and does not campaign; once the decoded state is swapped in, 11 and 12
// are applied after it, in order, and acknowledged.
func TestBackgroundRestoreAppliesNothingPastTheSnapshotBeforeTheSwap(t *testing.T) {
	b := newBackgroundRestore(t, NewMemoryStorage())
	snap := raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 10, Term: 1, ConfState: snapshotConf}, Data: []byte("state:10")}
	mustStep(t, b.h, raft.Message{Type: raft.MsgSnapshotRequest, From: 1, To: 2, Term: 1, Snapshot: snap})
	if !b.h.Restoring() || b.work == nil {
		t.Fatalf("restoring %v, background work %v: want the snapshot decoding in the background", b.h.Restoring(), b.work != nil)
	}
	if stored, _ := b.r.Snapshot(); stored.Metadata.Index != 10 {
		t.Fatalf("storage snapshot at %d before the decoding: want 10, durable first (step 1)", stored.Metadata.Index)
	}
	b.r.events = nil
	mustStep(t, b.h, raft.Message{Type: raft.MsgAppendRequest, From: 1, To: 2, Term: 1, LogIndex: 10, LogTerm: 1, Commit: 12,
		Entries: []raft.Entry{{Term: 1, Index: 11, Data: []byte("a")}, {Term: 1, Index: 12, Data: []byte("b")}}})
	for range 5 * raft.DefaultConfig().ElectionTicks {
		if err := b.h.Tick(); err != nil {
			t.Fatal(err)
		}
		mustStep(t, b.h, raft.Message{Type: raft.MsgHeartbeatRequest, From: 1, To: 2, Term: 1, Commit: 12})
	}
	if len(b.r.events) > 0 || b.h.Applied() != 0 || b.sm.state != "empty" {
		t.Fatalf("before the swap: events %q, applied %d, state %q; want nothing done", b.r.events, b.h.Applied(), b.sm.state)
	}
	if st := b.h.Core().Status(); st.Role != raft.Follower || st.Term != 1 {
		t.Fatalf("before the swap: %v in term %d, want a follower of term 1", st.Role, st.Term)
	}
	if err := b.runBackground(); err != nil {
		t.Fatal(err)
	}
	want := []string{"install state:10", "apply 11 a", "apply 12 b"}
	var got []string
	for _, e := range b.r.events {
		if strings.HasPrefix(e, "install") || strings.HasPrefix(e, "apply") {
			got = append(got, e)
		}
	}
	if !slices.Equal(got, want) || b.h.Applied() != 12 || b.sm.state != "state:10+a+b" {
		t.Fatalf("after the swap: %q, applied %d, state %q; want %q, 12, state:10+a+b", got, b.h.Applied(), b.sm.state, want)
	}
	acked := slices.ContainsFunc(b.r.sent, func(m raft.Message) bool {
		return m.Type == raft.MsgAppendResponse && !m.Reject && m.LogIndex == 12
	})
	if !acked {
		t.Fatalf("12 never acknowledged after the swap: sent %v", b.r.sent)
	}
}

// A snapshot that does not decode in the background (a damaged file) stops
// the handler with the error, the state machine as it was, and the
// storage still holding the snapshot and the hard state: a restart restores
// from it (here: a good copy), nothing lost.
func TestBackgroundRestoreOfADamagedSnapshotIsAnErrorAndLosesNothing(t *testing.T) {
	storage := NewMemoryStorage()
	b := newBackgroundRestore(t, storage)
	snap := raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 10, Term: 1, ConfState: snapshotConf}, Data: []byte("garbage")}
	mustStep(t, b.h, raft.Message{Type: raft.MsgSnapshotRequest, From: 1, To: 2, Term: 1, Snapshot: snap})
	err := b.runBackground()
	if err == nil || !strings.Contains(err.Error(), "damaged snapshot") || !strings.Contains(err.Error(), "restore snapshot 10") {
		t.Fatalf("Handle after a damaged snapshot's restore: %v, want the decoding error", err)
	}
	if b.sm.state != "empty" || b.h.Applied() != 0 {
		t.Fatalf("after the failed restore: state %q, applied %d; want the state untouched", b.sm.state, b.h.Applied())
	}
	if err := b.h.Step(raft.Message{Type: raft.MsgHeartbeatRequest, From: 1, To: 2, Term: 1}); err == nil {
		t.Fatal("the stopped handler still takes messages")
	}
	stored, err := storage.Snapshot()
	if err != nil || stored.Metadata.Index != 10 {
		t.Fatalf("storage after the failed restore: snapshot at %d, %v; want 10 kept", stored.Metadata.Index, err)
	}
	hs, _, _ := storage.InitialState()
	if hs.Term != 1 || hs.Commit != 10 {
		t.Fatalf("storage hard state after the failed restore: %+v, want term 1, commit 10", hs)
	}
}

// A node that stops (crashes) while its snapshot is being decoded drops the
// decoded state; restarted on its storage, it restores the snapshot there
// (synchronously, at start) and goes on from its index.
func TestCrashDuringBackgroundRestore(t *testing.T) {
	storage := NewMemoryStorage()
	b := newBackgroundRestore(t, storage)
	snap := raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 10, Term: 1, ConfState: snapshotConf}, Data: []byte("state:10")}
	mustStep(t, b.h, raft.Message{Type: raft.MsgSnapshotRequest, From: 1, To: 2, Term: 1, Snapshot: snap})
	b.h.Stop(errors.New("crash"))
	if err := b.runBackground(); err == nil || err.Error() != "crash" {
		t.Fatalf("after the crash: %v", err)
	}
	if b.sm.state != "empty" {
		t.Fatalf("a stopped handler swapped in %q", b.sm.state)
	}
	again := newBackgroundRestore(t, storage)
	if again.sm.state != "state:10" || again.h.Applied() != 10 {
		t.Fatalf("restarted: state %q, applied %d; want the snapshot at 10 restored", again.sm.state, again.h.Applied())
	}
	mustStep(t, again.h, raft.Message{Type: raft.MsgAppendRequest, From: 1, To: 2, Term: 1, LogIndex: 10, LogTerm: 1, Commit: 11,
		Entries: []raft.Entry{{Term: 1, Index: 11, Data: []byte("a")}}})
	if again.sm.state != "state:10+a" || again.h.Applied() != 11 {
		t.Fatalf("restarted, then 11 committed: state %q, applied %d", again.sm.state, again.h.Applied())
	}
}

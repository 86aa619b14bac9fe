package node

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"coord/raft"
)

// slowSaves is a Storage whose Save takes a time proportional to the bytes
// of its entries, as a disk's write and fsync do (in synctest's clock).
type slowSaves struct {
	MemoryStorage
	perMiB time.Duration
}

func (s slowSaves) Save(hs raft.HardState, entries []raft.Entry, sync bool) error {
	var n int
	for _, e := range entries {
		n += len(e.Data)
	}
	time.Sleep(time.Duration(n) * s.perMiB / (1 << 20))
	return s.MemoryStorage.Save(hs, entries, sync)
}

// Many large proposals at once keep the leader: the loop takes at most
// MaxEntryBytesPerBatch of them into one Ready, so no single write lasts
// long enough for the followers' election timeouts to run out between two
// rounds of heartbeats and appends. Without the bound (the control) the
// leader took all 64 into one write of 32 MiB, 640 ms of the disk here,
// sent nothing meanwhile (it neither ticks nor steps while it writes, and
// the appends it sent ahead stop at MaxInflightBytes), and its followers,
// whose elections time out after 100 to 200 ms, elected another leader.
// Deterministic in synctest's clock: only terms and leaders are checked.
func TestLargeProposalsAtOnceKeepTheLeader(t *testing.T) {
	for _, tc := range []struct {
		name         string
		maxBatch     uint64
		wantElection bool
	}{
		{"bounded batches", 2 << 20, false},
		{"unbounded batches (control)", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				runLargeProposals(t, tc.maxBatch, tc.wantElection)
			})
		})
	}
}

func runLargeProposals(t *testing.T, maxBatch uint64, wantElection bool) {
	const (
		proposals  = 64
		valueBytes = 512 << 10
	)
	// 20 ms a MiB: a batch of 2 MiB (four values) is written in 40 ms,
	// four ticks; all 64 values (32 MiB) in 640 ms, past the longest
	// election timeout (200 ms) even after the 160 ms a follower spends
	// writing the 8 MiB of appends sent ahead (MaxInflightBytes), during
	// which its clock does not run either.
	c := startBatchCluster(t, 21, func() Storage { return slowSaves{NewMemoryStorage(), 20 * time.Millisecond} }, maxBatch)
	leader := c.waitLeader(0)
	term := leader.node.Status().Term

	value := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, valueBytes) }
	var wg sync.WaitGroup
	errs := make([]error, proposals)
	for i := range proposals {
		wg.Go(func() {
			_, errs[i] = leader.node.Propose(context.Background(), fmt.Appendf(nil, "k%d=%s", i, value(i)))
		})
	}
	wg.Wait()

	elected := false
	for id, m := range c.members {
		st := m.node.Status()
		if st.Term != term || st.Lead != leader.node.ID() {
			elected = true
			if !wantElection {
				t.Errorf("node %d: term %d, leader %d; want term %d, leader %d unchanged",
					id, st.Term, st.Lead, term, leader.node.ID())
			}
		}
	}
	if wantElection {
		if !elected {
			t.Fatalf("control: every node kept term %d and leader %d with unbounded batches; the test cannot tell the bound's effect", term, leader.node.ID())
		}
		return // proposals may have been lost to the election
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("proposal %d: %v", i, err)
		}
	}
	for id, m := range c.members {
		waitUntil(t, fmt.Sprintf("node %d did not apply every value", id), nodesOf(m), func() bool {
			for i := range proposals {
				if m.sm.get(fmt.Sprintf("k%d", i)) != string(value(i)) {
					return false
				}
			}
			return true
		})
	}
}

// BatchBytes counts the entry data taken since the last Handle began: the
// leader's own proposals, and the entries of a stepped message (here a
// follower's forwarded proposals); Handle starts the next batch at zero.
func TestBatchBytesCountsProposalsAndSteppedEntries(t *testing.T) {
	h, r := newRecordedHandler(t, func(*recorder) Hooks { return Hooks{} })
	elect(t, h, r)
	if got := h.BatchBytes(); got != 0 {
		t.Fatalf("BatchBytes after Handle = %d, want 0", got)
	}
	for range 3 {
		if err := h.Propose(make([]byte, 1000), func(Result) {}); err != nil {
			t.Fatal(err)
		}
	}
	st := h.Core().Status()
	forwarded := raft.Message{Type: raft.MsgProposalRequest, From: 2, To: 1, Term: st.Term, ReadRound: 1,
		Entries: []raft.Entry{{Data: make([]byte, 500)}, {Data: make([]byte, 24)}}}
	if err := h.Step(forwarded); err != nil {
		t.Fatal(err)
	}
	if got, want := h.BatchBytes(), uint64(3*1000+500+24); got != want {
		t.Fatalf("BatchBytes = %d, want %d (three proposals and two forwarded entries)", got, want)
	}
	mustHandle(t, h)
	if got := h.BatchBytes(); got != 0 {
		t.Fatalf("BatchBytes after Handle = %d, want 0", got)
	}
}

// startBatchCluster starts three nodes on a memory network, each with the
// storage newStorage makes, ticks of 10 ms (elections after 100-200 ms),
// no snapshots and MaxEntryBytesPerBatch maxBatch; seed seeds their
// clocks' randomness. They stop when t ends.
func startBatchCluster(t *testing.T, seed uint64, newStorage func() Storage, maxBatch uint64) *testCluster {
	t.Helper()
	c := &testCluster{t: t, net: NewMemoryNetwork(), members: map[uint64]*member{}}
	ids := []uint64{1, 2, 3}
	for _, id := range ids {
		cfg := DefaultConfig()
		cfg.Raft.ID, cfg.Raft.Peers = id, ids
		cfg.Raft.Rand = rand.New(rand.NewPCG(id, seed))
		cfg.Storage = newStorage()
		cfg.Transport = c.net.Transport(id)
		m := &member{storage: cfg.Storage, sm: newKV()}
		cfg.StateMachine = m.sm
		cfg.TickInterval = 10 * time.Millisecond
		cfg.SnapshotEntries = 0
		cfg.MaxEntryBytesPerBatch = maxBatch
		n, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		m.node = n
		c.members[id] = m
		c.net.Attach(n)
	}
	t.Cleanup(c.stopAll)
	return c
}

package node

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"coord/raft"
)

// sizedMachine is a state machine whose snapshot is size bytes, taken in
// the background (a SnapshotViewer); failing makes the next views fail
// to write.
type sizedMachine struct {
	size    int
	failing error
}

func (*sizedMachine) Apply(uint64, []byte) any { return nil }
func (m *sizedMachine) Snapshot() ([]byte, error) {
	return bytes.Repeat([]byte{'s'}, m.size), nil
}
func (*sizedMachine) Restore([]byte) error { return nil }

func (m *sizedMachine) SnapshotView() (io.WriterTo, error) {
	return sizedView{size: m.size, m: m}, nil
}

// sizedView is the state as of its view: size bytes; it fails if its
// machine is failing when it is written.
type sizedView struct {
	size int
	m    *sizedMachine
}

func (v sizedView) WriteTo(w io.Writer) (int64, error) {
	if v.m.failing != nil {
		return 0, v.m.failing
	}
	n, err := w.Write(bytes.Repeat([]byte{'s'}, v.size))
	return int64(n), err
}

// triggerRig is a single-voter handler whose background snapshots wait
// in started until the test finishes them.
type triggerRig struct {
	t       *testing.T
	h       *Handler
	sm      *sizedMachine
	started []func() // each runs a snapshot's work and its finish
}

func newTriggerRig(t *testing.T, configure func(*HandlerConfig)) *triggerRig {
	t.Helper()
	g := &triggerRig{t: t, sm: &sizedMachine{}}
	cfg := raft.DefaultConfig()
	cfg.ID, cfg.Peers = 1, []uint64{1}
	cfg.Rand = rand.New(rand.NewPCG(1, 1))
	r := &recorder{MemoryStorage: NewMemoryStorage()}
	hc := HandlerConfig{Raft: cfg, Storage: r, Transport: r, StateMachine: g.sm}
	hc.Background = func(work func() error, finish func(error)) {
		g.started = append(g.started, func() { finish(work()) })
	}
	configure(&hc)
	h, err := NewHandler(hc)
	if err != nil {
		t.Fatal(err)
	}
	g.h = h
	h.Core().Campaign()
	mustHandle(t, h)
	if st := h.Core().Status(); st.Role != raft.Leader {
		t.Fatalf("a single voter is %v after its campaign", st.Role)
	}
	return g
}

// write applies n entries of size bytes each, one Ready each.
func (g *triggerRig) write(n, size int) {
	g.t.Helper()
	for range n {
		if err := g.h.Propose(bytes.Repeat([]byte{'e'}, size), func(Result) {}); err != nil {
			g.t.Fatal(err)
		}
		mustHandle(g.t, g.h)
	}
}

// finishAll writes and installs the snapshots started so far.
func (g *triggerRig) finishAll() {
	g.t.Helper()
	for len(g.started) > 0 {
		run := g.started[0]
		g.started = g.started[1:]
		run()
		mustHandle(g.t, g.h)
	}
}

// startedAfter writes n entries of size bytes and reports whether a
// snapshot started meanwhile.
func (g *triggerRig) startedAfter(n, size int) bool {
	g.t.Helper()
	before := len(g.started)
	g.write(n, size)
	return len(g.started) > before
}

// TestSnapshotLogPercentWaitsForTheLogToMatchTheSnapshot: with
// SnapshotLogPercent, the entries past SnapshotEntries do not take a
// snapshot until the data applied since the last reaches that share of
// its size (plus at most a quarter more); without it, SnapshotEntries
// alone does, whatever the state's size.
func TestSnapshotLogPercentWaitsForTheLogToMatchTheSnapshot(t *testing.T) {
	const entries, entryBytes, stateBytes = 10, 100, 10_000
	for _, percent := range []uint64{0, 50, 100} {
		g := newTriggerRig(t, func(c *HandlerConfig) { c.SnapshotEntries, c.SnapshotLogPercent = entries, percent })
		g.sm.size = stateBytes
		// The first snapshot: the handler has seen none, so SnapshotEntries
		// alone decides.
		for i := 0; !g.startedAfter(1, entryBytes); i++ {
			if i > entries {
				t.Fatalf("percent %d: no snapshot after SnapshotEntries (%d) entries, the first", percent, entries)
			}
		}
		g.finishAll()
		// Now 10,000 bytes of snapshot: the log must reach percent of it.
		need := stateBytes * int(percent) / 100
		written := 0
		for !g.startedAfter(1, entryBytes) {
			written += entryBytes
			if written > 2*stateBytes {
				t.Fatalf("percent %d: no snapshot after %d bytes of entries since a snapshot of %d bytes", percent, written, stateBytes)
			}
		}
		written += entryBytes
		switch {
		case percent == 0 && written != entries*entryBytes:
			t.Fatalf("percent 0: a snapshot after %d bytes of entries, want after SnapshotEntries (%d entries, %d bytes)", written, entries, entries*entryBytes)
		case percent != 0 && (written < need || written > need+need/snapshotJitterDivisor+entryBytes):
			t.Fatalf("percent %d: a snapshot after %d bytes of entries since one of %d bytes: want between %d and %d",
				percent, written, stateBytes, need, need+need/snapshotJitterDivisor+entryBytes)
		}
	}
}

// TestSnapshotBytesCapsTheLogPercent: SnapshotBytes is a cap on the log
// kept between snapshots (the Disk holds it in memory): SnapshotLogPercent
// does not hold a snapshot back past it, however large the state.
func TestSnapshotBytesCapsTheLogPercent(t *testing.T) {
	const entries, entryBytes, stateBytes, capBytes = 10, 100, 10_000, 2_000
	g := newTriggerRig(t, func(c *HandlerConfig) {
		c.SnapshotEntries, c.SnapshotLogPercent, c.SnapshotBytes = entries, 100, capBytes
	})
	g.sm.size = stateBytes
	for i := 0; !g.startedAfter(1, entryBytes); i++ { // the first: SnapshotEntries alone decides
		if i > entries {
			t.Fatalf("no snapshot after SnapshotEntries (%d) entries, the first", entries)
		}
	}
	g.finishAll()
	written := 0
	for !g.startedAfter(1, entryBytes) {
		if written += entryBytes; written > stateBytes {
			t.Fatalf("no snapshot after %d bytes of entries, with SnapshotBytes %d", written, capBytes)
		}
	}
	if written += entryBytes; written != capBytes {
		t.Fatalf("a snapshot after %d bytes of entries since one of %d bytes, want at SnapshotBytes (%d): percent 100 alone waits for %d",
			written, stateBytes, capBytes, g.h.logBytesMin)
	}
}

// TestSnapshotLogPercentJittersEachNode: two nodes that apply the same
// entries, with different random sources, do not wait for the same amount
// of log (the three members of a cluster would all snapshot at once).
func TestSnapshotLogPercentJittersEachNode(t *testing.T) {
	waits := map[uint64]bool{}
	for seed := range uint64(4) {
		g := newTriggerRig(t, func(c *HandlerConfig) {
			c.SnapshotEntries, c.SnapshotLogPercent = 1, 100
			c.Raft.Rand = rand.New(rand.NewPCG(seed, 99))
		})
		g.h.snapshotSizeIs(1 << 20)
		waits[g.h.logBytesMin] = true
		if min, max := uint64(1<<20), uint64(1<<20)*5/4; g.h.logBytesMin < min || g.h.logBytesMin > max {
			t.Fatalf("seed %d: waits for %d bytes of log after a snapshot of 1 MiB, want %d to %d", seed, g.h.logBytesMin, min, max)
		}
	}
	if len(waits) < 2 {
		t.Fatalf("four random sources, one wait for the log after a snapshot: %v", waits)
	}
}

// TestFailedSnapshotCountsItsBytesAgain: a snapshot that fails gives back
// the entry data it was to cover, so that SnapshotBytes fires again at
// the next retry without a fresh SnapshotBytes of writes (a full disk
// must not double the log the node keeps).
func TestFailedSnapshotCountsItsBytesAgain(t *testing.T) {
	const bound, entryBytes = 1000, 100
	g := newTriggerRig(t, func(c *HandlerConfig) { c.SnapshotEntries, c.SnapshotBytes = 1_000_000, bound })
	g.sm.size = 10
	if !g.startedAfter(bound/entryBytes, entryBytes) {
		t.Fatalf("no snapshot after SnapshotBytes (%d) of entries", bound)
	}
	g.sm.failing = errors.New("disk on fire")
	g.finishAll()
	if g.h.lastSnapshot != 0 {
		t.Fatalf("a failed snapshot recorded at %d", g.h.lastSnapshot)
	}
	g.sm.failing = nil
	// Past the back-off, one small entry takes the snapshot again: the
	// failed one's bytes still count.
	for g.h.ticks < g.h.compactAfter {
		if err := g.h.Tick(); err != nil {
			t.Fatal(err)
		}
		mustHandle(t, g.h)
	}
	if len(g.started) != 0 {
		t.Fatalf("a snapshot started during the back-off")
	}
	if !g.startedAfter(1, 1) {
		t.Fatalf("no snapshot after the back-off: the failed snapshot's %d bytes of entries were not counted again", bound)
	}
	g.finishAll()
	if g.h.lastSnapshot == 0 {
		t.Fatal("the retried snapshot was not recorded")
	}
}

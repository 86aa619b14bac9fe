package server

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"coord/storage/vfs"
)

// A forwarded write whose leader is deposed before it says where it put
// the write gives that answer a grace (a heartbeat interval) to arrive
// (ProposeForwarded). An answer that comes within the grace makes the
// write's fate certain as any other placement does: the follower waits for
// the entry committed at the index the leader named, and answers from it,
// the write if that entry has the leader's term, a definite failure if
// another term's entry took the index. Before, such a write was answered
// unknown_outcome when its grace ended.
//
// The tests fix the order of events with the nodes' disks (logGate) and a
// grace that ends when the test says (Node.forwardGrace), not with timing:
// five nodes, the leader L (4) held in the sync of the write's entry, so
// that its answer waits; nodes 1 to 3 elect a new leader but can make
// nothing of a later term durable, so that nothing commits while the test
// runs its steps; the follower F (5), patient, forwards the write and sees
// the new leader; L is let go, its answer reaches F within the grace, the
// grace ends, and only then may the new leader commit. The simulator
// (sim/) cannot run this: it drives node.Handler, and the grace is the
// server's (ProposeForwarded), so the nodes here are in-process, over TCP
// on loopback, with real disks.

// logGate holds disk operations of the nodes it was given a rule for,
// until the rule changes: a node held in a write or a sync takes no
// message and sends none of what waits for its disk (its answers, the
// answer to a forwarded write included), while what its Ready sends ahead
// (a leader's appends) is out, and its connections stay open. Safe for
// concurrent use.
type logGate struct {
	mu    sync.Mutex
	rules map[uint64]*gateRule
}

// gateRule is one node's rule: the operations hold reports true for wait
// until the rule is replaced (release is closed then); held is closed at
// the first.
type gateRule struct {
	hold     func(op vfs.Op) bool
	release  chan struct{}
	held     chan struct{}
	heldOnce sync.Once
}

func newLogGate() *logGate { return &logGate{rules: map[uint64]*gateRule{}} }

// fs is node id's file system (testCluster.fsFor).
func (g *logGate) fs(id uint64) vfs.FS {
	return vfs.NewFaultFS(vfs.OS, id, func(op vfs.Op) vfs.Fault {
		g.mu.Lock()
		r := g.rules[id]
		g.mu.Unlock()
		if r != nil && r.hold(op) {
			r.heldOnce.Do(func() { close(r.held) })
			<-r.release
		}
		return vfs.NoFault
	})
}

// set gives node id the rule hold (nil: none), and lets go what the rule
// before held.
func (g *logGate) set(id uint64, hold func(op vfs.Op) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if old := g.rules[id]; old != nil {
		close(old.release)
		delete(g.rules, id)
	}
	if hold != nil {
		g.rules[id] = &gateRule{hold: hold, release: make(chan struct{}), held: make(chan struct{})}
	}
}

// openAll removes every rule.
func (g *logGate) openAll() {
	g.mu.Lock()
	ids := make([]uint64, 0, len(g.rules))
	for id := range g.rules {
		ids = append(ids, id)
	}
	g.mu.Unlock()
	for _, id := range ids {
		g.set(id, nil)
	}
}

// waitHeld waits until node id's rule holds an operation.
func (g *logGate) waitHeld(t *testing.T, id uint64) {
	t.Helper()
	g.mu.Lock()
	r := g.rules[id]
	g.mu.Unlock()
	if r == nil {
		t.Fatalf("node %d has no rule to be held by", id)
	}
	select {
	case <-r.held:
	case <-time.After(30 * time.Second):
		t.Fatalf("node %d's disk was never held", id)
	}
}

// holdWrites holds every write.
func holdWrites(op vfs.Op) bool { return op.Kind == vfs.OpWrite }

// holdLogSyncs holds every sync of the log (its segments): every Save of
// entries ends with one. A term and vote alone need none (they are durable
// in raftstore's VOTE file, and the log's record of them waits for the
// next sync), so a node held by it still votes and campaigns.
func holdLogSyncs(op vfs.Op) bool {
	return op.Kind == vfs.OpSync && strings.HasSuffix(op.Name, ".wal")
}

// holdLogSyncsPast holds the log syncs a node makes once its published
// term (termOf) is past term: it writes what a leader of term sends, votes
// and campaigns in any term, but makes no entry of a later term durable, so
// no later leader commits while it is held (with the leader of term held
// too, no three of five nodes can).
func holdLogSyncsPast(term uint64, termOf func() uint64) func(vfs.Op) bool {
	return func(op vfs.Op) bool { return holdLogSyncs(op) && termOf() > term }
}

// The nodes of the grace tests.
const (
	graceLeader   = 4 // L: never campaigns, and as a leader never checks its quorum within a test
	graceFollower = 5 // F: patient (it never campaigns, and ignores candidates)
)

// startGraceCluster starts five nodes on g's file systems, has node
// graceLeader lead, waits for the follower's connection to it and writes
// a first entry on every node.
func startGraceCluster(t *testing.T, g *logGate) (c *testCluster, l, f *testNode, others []*testNode) {
	t.Helper()
	c = &testCluster{t: t, peers: map[uint64]string{}, https: map[uint64]net.Listener{}, nodes: map[uint64]*testNode{},
		fsFor: g.fs, configFor: func(id uint64, cfg *Config) {
			switch id {
			case graceFollower:
				patient(cfg)
			case graceLeader:
				// An election timeout of hours: it never campaigns on its
				// own, and, leading, checks its quorum only once one has
				// passed: it leads until it hears of a later term.
				cfg.ElectionTicks = 1 << 21
			default:
				// Elections after 1 to 2 s of silence, so that a loaded
				// machine does not elect by starvation alone.
				cfg.ElectionTicks = 50
			}
		}}
	c.startNodes(5)
	t.Cleanup(g.openAll) // registered after startNodes' cleanup, so run before it
	deadline := time.After(60 * time.Second)
	for {
		changed := c.nodes[graceLeader].StatusChanged()
		lead := c.waitLeader()
		if lead == graceLeader {
			break
		}
		// Nodes 1 to 3 elected one of them; it hands over to L. A
		// transfer that did not happen (the leader gives one up after an
		// election timeout) is asked for again.
		_ = c.nodes[lead].shell.TransferLeadership(ctx(t), graceLeader)
		select {
		case <-changed:
		case <-time.After(5 * time.Second):
		case <-deadline:
			t.Fatalf("node %d never took the lead", graceLeader)
		}
	}
	l, f = c.nodes[graceLeader], c.nodes[graceFollower]
	for id, n := range c.nodes {
		if id != graceLeader && id != graceFollower {
			others = append(others, n)
		}
	}
	waitPeerConnected(t, f, graceLeader)
	// A leader proposes the peers' addresses it finds missing: once L's
	// state has them all, and every node the entry written after them,
	// L proposes nothing more of its own, and the write the test forwards
	// is the entry L is held in.
	waitApplied(t, l, 30*time.Second, "every peer's address recorded", func(View) bool {
		return len(l.sm.machine.Peers()) == len(c.nodes) // View holds l.sm.mu
	})
	writeEverywhere(t, c, "warm")
	return c, l, f, others
}

// placedInGrace runs the scenario of the file's comment and returns what
// F's ProposeForwarded answered. If lost, L's log is the only one besides
// F's that gets the write: L's transport drops nodes 1 to 3 before it, and
// takes them back at the end.
func placedInGrace(t *testing.T, lost bool) (c *testCluster, at uint64, _ Result, _ error) {
	g := newLogGate()
	c, l, f, others := startGraceCluster(t, g)
	st := l.shell.Status()
	term, at := st.Term, st.LastIndex+1
	t.Logf("L (%d) leads in term %d, its log ends at %d: the write goes at %d", l.id, term, st.LastIndex, at)

	// F's grace for a deposed leader's answer ends when the test sends.
	armed, end := make(chan struct{}, 1), make(chan time.Time)
	f.forwardGrace = func() <-chan time.Time {
		armed <- struct{}{}
		return end
	}

	for _, o := range others {
		if lost {
			// No election until L placed the write.
			g.set(o.id, holdWrites)
		} else {
			g.set(o.id, holdLogSyncsPast(term, func() uint64 { return o.shell.Status().Term }))
		}
	}
	if lost {
		for _, o := range others {
			l.tr.RemovePeer(o.id)
		}
	}
	g.set(l.id, holdLogSyncs)

	type answer struct {
		res Result
		err error
	}
	answers := make(chan answer, 1)
	wctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		res, err := f.ProposeForwarded(wctx, Command{Op: OpPut, Key: "placed-in-grace", Value: []byte("1")})
		answers <- answer{res, err}
	}()
	// L appended the write and sent its appends; its answer to F waits
	// for the sync it is held in.
	g.waitHeld(t, l.id)
	if lost {
		for _, o := range others {
			g.set(o.id, holdLogSyncsPast(term, func() uint64 { return o.shell.Status().Term }))
		}
	}

	// Nodes 1 to 3 elect a leader, which F follows: its write's grace
	// begins.
	select {
	case <-armed:
	case a := <-answers:
		t.Fatalf("F answered %+v, %v before its leader changed", a.res, a.err)
	case <-time.After(60 * time.Second):
		t.Fatalf("F never saw a new leader (its status: %+v)", f.shell.Status())
	}
	if st := f.shell.Status(); st.Lead == graceLeader || st.Term <= term {
		t.Fatalf("F's grace began with leader %d in term %d; want a leader other than %d in a term past %d", st.Lead, st.Term, graceLeader, term)
	}

	// L's answer comes within the grace.
	g.set(l.id, nil)
	waitCount(t, "writes the deposed leader placed", f.sm.forwards, &f.sm.forwards.placed, 1)
	select {
	case end <- time.Now():
	case a := <-answers:
		t.Fatalf("F answered %+v, %v before its grace ended", a.res, a.err)
	case <-time.After(30 * time.Second):
		t.Fatal("F's write stopped waiting for its grace")
	}

	// Only now may anything commit.
	for _, o := range others {
		g.set(o.id, nil)
	}
	if lost {
		for _, o := range others {
			l.tr.AddPeer(o.id, c.peers[o.id])
		}
	}
	select {
	case a := <-answers:
		return c, at, a.res, a.err
	case <-time.After(90 * time.Second):
		t.Fatal("F never answered its write")
	}
	return nil, 0, Result{}, nil
}

// The leader's answer came in its grace and the entry at the index it
// named has its term: the write applied, and F says so, with the revision
// it has on every node.
func TestForwardedWritePlacedInTheGraceIsAnsweredByItsIndex(t *testing.T) {
	c, at, res, err := placedInGrace(t, false)
	if err != nil {
		t.Fatalf("a forwarded write placed in its deposed leader's grace, then committed: %v; want its result", err)
	}
	if res.Revision != at {
		t.Fatalf("the write applied at %d, not at %d where L was held: the test's order of events broke", res.Revision, at)
	}
	writeEverywhere(t, c, "after")
	for id, n := range c.nodes {
		n.View(func(v View) {
			if kv, ok := v.Get("placed-in-grace"); !ok || kv.Version != 1 || kv.Revision != res.Revision {
				t.Errorf("node %d: placed-in-grace = %+v (present %v), want written once at revision %d, as F answered", id, kv, ok, res.Revision)
			}
		})
	}
}

// The leader's answer came in its grace, but another term's entry took
// the index it named: F says the write was not applied (ErrNotLeader, so
// the API may send it again), not unknown, and no node applies it.
func TestForwardedWritePlacedInTheGraceAndReplacedFails(t *testing.T) {
	c, _, _, err := placedInGrace(t, true)
	if !errors.Is(err, ErrNotLeader) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a forwarded write placed in its deposed leader's grace, then replaced at its index: %v; want ErrNotLeader (never applied)", err)
	}
	writeEverywhere(t, c, "after")
	for id, n := range c.nodes {
		n.View(func(v View) {
			if kv, ok := v.Get("placed-in-grace"); ok {
				t.Errorf("node %d applied the write another entry replaced: %+v", id, kv)
			}
		})
	}
}

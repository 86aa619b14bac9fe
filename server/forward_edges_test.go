package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coord/raft"
	"coord/storage/vfs"
)

// The follower path's edge cases over real TCP on loopback: what a
// follower answers when its leader's connection closes under a forwarded
// write, when a deposed leader held its reads, and when a write the leader
// had placed meets a leader change. Each test stops a node's loop by
// blocking its disk (freezer), so that what the node has and has not done
// is fixed by the test, not by timing.

// freezer blocks every write of the nodes it was told to freeze, until
// release: a node whose loop writes its log then stops there, takes no
// message and sends none of the answers that wait for its disk, while its
// connections stay open, as a process stopped (SIGSTOP) would. Safe for
// concurrent use.
type freezer struct {
	mu      sync.Mutex
	blocked map[uint64]chan struct{} // per frozen node, closed at its first blocked write
	release chan struct{}
	once    sync.Once
}

func newFreezer() *freezer {
	return &freezer{blocked: map[uint64]chan struct{}{}, release: make(chan struct{})}
}

// fs is node id's file system (testCluster.fsFor).
func (z *freezer) fs(id uint64) vfs.FS {
	var first sync.Once
	return vfs.NewFaultFS(vfs.OS, id, func(op vfs.Op) vfs.Fault {
		if op.Kind != vfs.OpWrite {
			return vfs.NoFault
		}
		z.mu.Lock()
		blocked, frozen := z.blocked[id]
		z.mu.Unlock()
		if frozen {
			first.Do(func() { close(blocked) })
			<-z.release
		}
		return vfs.NoFault
	})
}

// freeze blocks node id's writes from now on.
func (z *freezer) freeze(id uint64) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.blocked[id] = make(chan struct{})
}

// waitBlocked waits until frozen node id blocks in a write.
func (z *freezer) waitBlocked(t *testing.T, id uint64) {
	t.Helper()
	z.mu.Lock()
	blocked := z.blocked[id]
	z.mu.Unlock()
	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatalf("node %d never wrote to its disk after it was frozen", id)
	}
}

// releaseAll lets every blocked write go on, and every later one.
func (z *freezer) releaseAll() { z.once.Do(func() { close(z.release) }) }

// newFrozenCluster starts a cluster of size nodes on z's file systems,
// each configured by configFor (nil: the defaults). It releases z before
// the nodes stop when the test ends (a frozen node could not stop).
func newFrozenCluster(t *testing.T, size int, z *freezer, configFor func(id uint64, cfg *Config)) *testCluster {
	c := &testCluster{t: t, peers: map[uint64]string{}, https: map[uint64]net.Listener{}, nodes: map[uint64]*testNode{},
		fsFor: z.fs, configFor: configFor}
	c.startNodes(size)
	t.Cleanup(z.releaseAll) // registered after startNodes' cleanup, so run before it
	return c
}

// patient gives a node timers that outlast any test: an election timeout
// of hours, so that it never campaigns or forgets its leader on its own,
// and a heartbeat interval of hours, the grace a forwarded write it holds
// gives a deposed leader's answer (ProposeForwarded). What it does within
// a test it does on an event, not a timer.
func patient(cfg *Config) {
	cfg.HeartbeatTicks = 1 << 20 // × 20 ms: 5.8 hours
	cfg.ElectionTicks = 1 << 21
}

// startWithPatientFollower starts size nodes on z's file systems: the
// last one patient, the others configured by others (nil: the defaults).
// It waits for a leader (not the patient node, which never campaigns) and
// for the patient follower's connection to it, writes a first entry on
// every node, and returns the cluster, its leader and the patient follower.
func startWithPatientFollower(t *testing.T, size int, z *freezer, others func(cfg *Config)) (c *testCluster, l, f *testNode) {
	t.Helper()
	followerID := uint64(size)
	c = newFrozenCluster(t, size, z, func(id uint64, cfg *Config) {
		switch {
		case id == followerID:
			patient(cfg)
		case others != nil:
			others(cfg)
		}
	})
	leader := c.waitLeader()
	l, f = c.nodes[leader], c.nodes[followerID]
	waitPeerConnected(t, f, leader)
	writeEverywhere(t, c, "warm")
	return c, l, f
}

// writeEverywhere proposes a write and waits until every running node of c
// applied it.
func writeEverywhere(t *testing.T, c *testCluster, key string) {
	t.Helper()
	propose(t, c, Command{Op: OpPut, Key: key, Value: []byte("x")})
	for _, n := range c.nodes {
		waitApplied(t, n, 30*time.Second, key, func(v View) bool { _, ok := v.Get(key); return ok })
	}
}

// waitCount waits until the forwardWaiters counter count reads want at
// least.
func waitCount(t *testing.T, what string, f *forwardWaiters, count *atomic.Uint64, want uint64) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		changed := f.countChanged()
		if count.Load() >= want {
			return
		}
		if !waitAny([]<-chan struct{}{changed}, deadline) {
			t.Fatalf("%s: %d, never %d", what, count.Load(), want)
		}
	}
}

// A forwarded write whose leader's end closed the connection after the
// write went out gives up as soon as the follower's view of the leader
// changes (server.peerCloseCounts), with unknown_outcome: no answer can
// come over a closed connection, and answers are not sent again. The
// follower is patient, so the heartbeat interval's grace it would give an
// answer otherwise lasts hours: an answer within the test's minute is the
// close's doing. The leader is frozen before the write reaches it, so it
// never appends it, and the survivors agree it never applied.
func TestForwardedWriteGivesUpAtOnceWhenTheLeadersConnectionCloses(t *testing.T) {
	z := newFreezer()
	c, l, f := startWithPatientFollower(t, 3, z, nil)
	leader := l.id

	// The leader's loop stops in the write of an entry of its own: it will
	// never step the forwarded write, so it neither places nor answers it.
	z.freeze(leader)
	go func() { _, _ = l.Propose(context.Background(), Command{Op: OpPut, Key: "stuck", Value: []byte("x")}) }()
	z.waitBlocked(t, leader)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	answer := make(chan error, 1)
	go func() {
		_, err := f.ProposeForwarded(ctx, Command{Op: OpPut, Key: "gone", Value: []byte("1")})
		answer <- err
	}()
	// The write went out once the follower's loop handled the Ready that
	// sends it; a request through the loop after it (a leadership
	// transfer, refused at once on a follower) returns after that.
	waitCount(t, "writes handed to the follower's loop", f.sm.forwards, &f.sm.forwards.handed, 1)
	_ = f.shell.TransferLeadership(context.Background(), f.id)

	// The leader's process dies: the kernel closes its connections.
	if err := l.tr.Close(); err != nil {
		t.Fatalf("closing the leader's transport: %v", err)
	}
	err := <-answer
	if !errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), "its connection closed") {
		t.Fatalf("forwarded write whose leader's connection closed: %v; want ErrOutcomeUnknown at once, for the closed connection", err)
	}

	z.releaseAll()
	c.crash(leader)
	writeEverywhere(t, c, "after")
	for id, n := range c.nodes {
		n.View(func(v View) {
			if _, ok := v.Get("gone"); ok {
				t.Errorf("node %d applied the write its frozen leader never stepped", id)
			}
		})
	}
}

// A deposed leader refuses the read-index requests it held for its
// followers (raft.Core.dropReads), so that a follower's read fails at once
// and its caller retries elsewhere, instead of waiting for an answer that
// will never come. Three of five nodes are frozen, so the leader can
// confirm no read round and steps down at its check-quorum timeout; the
// patient follower still takes it for its leader then, so only the
// refusal can end its read within the test's minute.
func TestDeposedLeaderRefusesTheFollowerReadsItHolds(t *testing.T) {
	z := newFreezer()
	c, l, f := startWithPatientFollower(t, 5, z, func(cfg *Config) {
		// A check-quorum timeout of 1 to 2 s: the follower's read reaches
		// the leader well before it steps down.
		cfg.ElectionTicks = 50
	})
	leader := l.id

	// The other three followers stop in the write of the leader's next
	// entry: from then on they answer no heartbeat, and the leader and f,
	// two of five, confirm no read round.
	var others []uint64
	for id := range c.nodes {
		if id != leader && id != f.id {
			others = append(others, id)
			z.freeze(id)
		}
	}
	go func() { _, _ = l.Propose(context.Background(), Command{Op: OpPut, Key: "stuck", Value: []byte("x")}) }()
	for _, id := range others {
		z.waitBlocked(t, id)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := f.shell.ReadIndex(ctx)
	if !errors.Is(err, raft.ErrNotLeader) || !strings.Contains(err.Error(), "dropped") {
		t.Fatalf("read on a follower whose leader held it and stepped down: %v; want it dropped at once (raft.ErrNotLeader)", err)
	}
	if st := f.Status(); st.Leader != leader {
		t.Fatalf("the follower's leader is %d, want still %d: the read must have ended by the leader's refusal, not by the follower's own leader change", st.Leader, leader)
	}
	// And the leader did step down (its status may follow the refusal,
	// which left in the same Ready).
	deadline := time.After(30 * time.Second)
	for {
		changed := l.StatusChanged()
		if l.Status().Leader != leader {
			break
		}
		if !waitAny([]<-chan struct{}{changed}, deadline) {
			t.Fatalf("node %d still leads with three of five nodes frozen", leader)
		}
	}
}

// A forwarded write the leader placed (it said at which index) has a
// certain outcome even if the leader dies before it commits: the follower
// waits for the entry committed at that index under the next leader, and
// answers from it (ProposeForwarded). Three of five nodes are frozen, so
// the write cannot commit under the leader that placed it; the leader then
// dies, the three thaw, and the next leader commits the write. The client,
// through the follower's API, gets 200 with the revision the write has on
// every node, where it was written once.
func TestPlacedForwardedWriteIsCertainAcrossALeaderChange(t *testing.T) {
	z := newFreezer()
	c := newFrozenCluster(t, 5, z, nil)
	leader := c.waitLeader()
	f := c.follower(leader)
	waitPeerConnected(t, f, leader)
	writeEverywhere(t, c, "warm")

	for id := range c.nodes {
		if id != leader && id != f.id {
			z.freeze(id)
		}
	}
	answer := make(chan reply, 1)
	go func() { answer <- callAs(t, "PUT", f.httpURL+"/v1/kv/placed", "", "1") }()
	waitCount(t, "writes the leader placed", f.sm.forwards, &f.sm.forwards.placed, 1)

	// Placed, not committed: the leader and f are two of five. The leader
	// dies; the frozen three thaw and elect the next leader.
	c.crash(leader)
	z.releaseAll()
	r := <-answer
	if r.code != http.StatusOK {
		t.Fatalf("a placed forwarded write across a leader change: %d %v, want 200 (its outcome is certain)", r.code, r.body)
	}
	revision := uint64(r.body["revision"].(float64))
	writeEverywhere(t, c, "after")
	for id, n := range c.nodes {
		n.View(func(v View) {
			if kv, ok := v.Get("placed"); !ok || kv.Version != 1 || kv.Revision != revision {
				t.Errorf("node %d: placed = %+v (present %v), want written once at revision %d, as the client was told", id, kv, ok, revision)
			}
		})
	}
}

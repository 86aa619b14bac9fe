package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coord/storage/vfs"
)

// testNode is one in-process node with a real data directory, a real TCP
// transport on loopback and a real HTTP API.
type testNode struct {
	*Node
	id      uint64
	dir     string
	httpURL string
	srv     *http.Server
	metrics *Metrics
}

type testCluster struct {
	t     testing.TB
	peers map[uint64]string
	https map[uint64]net.Listener
	nodes map[uint64]*testNode
	// withMetrics gives each node started from now on its own Metrics.
	withMetrics bool
	// fsFor, if set, gives each node its file system.
	fsFor func(id uint64) vfs.FS
	// apiConfig configures the API of each node started from now on.
	apiConfig APIConfig
	// configFor, if set, changes the configuration of each node started
	// from now on (before start's opts).
	configFor func(id uint64, cfg *Config)
}

var quiet = slog.New(slog.DiscardHandler)

func freeListener(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newTestCluster(t *testing.T, size int) *testCluster {
	return newTestClusterOf(t, size, false)
}

// newTestClusterOf is newTestCluster, with Metrics on every node if
// withMetrics.
func newTestClusterOf(t *testing.T, size int, withMetrics bool) *testCluster {
	return newTestClusterFS(t, size, withMetrics, nil)
}

// newTestClusterFS is newTestClusterOf, with each node on the file system
// fsFor returns (nil: the real one).
func newTestClusterFS(t *testing.T, size int, withMetrics bool, fsFor func(id uint64) vfs.FS) *testCluster {
	c := &testCluster{t: t, peers: map[uint64]string{}, https: map[uint64]net.Listener{}, nodes: map[uint64]*testNode{},
		withMetrics: withMetrics, fsFor: fsFor}
	c.startNodes(size)
	return c
}

// startNodes starts nodes 1 to size of c, on loopback listeners and
// fresh data directories, and stops them when the test ends.
func (c *testCluster) startNodes(size int) {
	raftListeners := map[uint64]net.Listener{}
	for id := uint64(1); id <= uint64(size); id++ {
		raftListeners[id] = freeListener(c.t)
		c.peers[id] = raftListeners[id].Addr().String()
		c.https[id] = freeListener(c.t)
	}
	for id := uint64(1); id <= uint64(size); id++ {
		c.start(id, raftListeners[id], c.t.TempDir())
	}
	c.t.Cleanup(func() {
		for _, n := range c.nodes {
			n.stop()
		}
	})
}

// start starts node id on dir, telling it every address in c.peers; opts
// change its configuration further.
func (c *testCluster) start(id uint64, raftL net.Listener, dir string, opts ...func(*Config)) *testNode {
	c.t.Helper()
	cfg := DefaultConfig()
	cfg.ID, cfg.Peers, cfg.PeerListener, cfg.DataDir = id, c.peers, raftL, dir
	cfg.TickInterval = 20 * time.Millisecond
	cfg.Logger = quiet
	cfg.SnapshotEntries = 50 // compact often, so restarts exercise snapshots
	cfg.SnapshotLogPercent = 0
	if c.fsFor != nil {
		cfg.FS = c.fsFor(id)
	}
	if c.withMetrics {
		cfg.Metrics = NewMetrics()
	}
	if c.configFor != nil {
		c.configFor(id, &cfg)
	}
	for _, o := range opts {
		o(&cfg)
	}
	httpL := c.https[id]
	cfg.HTTPAddr = httpL.Addr().String()
	node, err := NewNode(cfg)
	if err != nil {
		c.t.Fatalf("node %d: %v", id, err)
	}
	srv := &http.Server{Handler: NewAPI(node, c.apiConfig)}
	go srv.Serve(httpL)
	n := &testNode{Node: node, id: id, dir: dir, httpURL: "http://" + cfg.HTTPAddr, srv: srv, metrics: cfg.Metrics}
	c.nodes[id] = n
	return n
}

func (n *testNode) stop() {
	n.srv.Close()
	n.Node.Close()
}

// crash stops a node, keeping its data directory.
func (c *testCluster) crash(id uint64) {
	c.nodes[id].stop()
	delete(c.nodes, id)
}

// restart starts a crashed node again from its data directory, on the same
// addresses.
func (c *testCluster) restart(id uint64, dir string, opts ...func(*Config)) *testNode {
	c.t.Helper()
	raftL, err := net.Listen("tcp", c.peers[id])
	if err != nil {
		c.t.Skipf("cannot rebind %s: %v", c.peers[id], err)
	}
	httpL, err := net.Listen("tcp", c.https[id].Addr().String())
	if err != nil {
		c.t.Skipf("cannot rebind http: %v", err)
	}
	c.https[id] = httpL
	return c.start(id, raftL, dir, opts...)
}

// waitLeader waits until every running node agrees on one leader, and
// returns it.
func (c *testCluster) waitLeader() uint64 {
	c.t.Helper()
	return c.waitLeaderWithin(30 * time.Second)
}

// waitLeaderWithin is waitLeader with its own bound, for clusters whose
// election timeouts are long.
func (c *testCluster) waitLeaderWithin(wait time.Duration) uint64 {
	c.t.Helper()
	deadline := time.After(wait)
	for {
		var changed []<-chan struct{}
		for _, n := range c.nodes {
			changed = append(changed, n.StatusChanged())
		}
		var leader uint64
		agree := true
		for _, n := range c.nodes {
			st := n.Status()
			if st.Leader == 0 || (leader != 0 && st.Leader != leader) {
				agree = false
				break
			}
			leader = st.Leader
		}
		if agree && leader != 0 && c.nodes[leader] != nil {
			return leader
		}
		if !waitAny(changed, deadline) {
			c.t.Fatalf("no agreed leader within %v", wait)
		}
	}
}

// waitAny waits until one of chans is closed, and reports false if deadline
// fires first.
func waitAny(chans []<-chan struct{}, deadline <-chan time.Time) bool {
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(deadline)}}
	for _, ch := range chans {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	chosen, _, _ := reflect.Select(cases)
	return chosen != 0
}

func (c *testCluster) follower(leader uint64) *testNode {
	for id, n := range c.nodes {
		if id != leader {
			return n
		}
	}
	c.t.Fatal("no follower")
	return nil
}

// waitApplied waits until cond holds of n's state machine, looking again
// at each change the node applies.
func waitApplied(t *testing.T, n *testNode, wait time.Duration, what string, cond func(View) bool) {
	t.Helper()
	deadline := time.After(wait)
	for {
		changed := n.Changed()
		var ok bool
		n.View(func(v View) { ok = cond(v) })
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("node %d: %s within %v", n.id, what, wait)
		}
	}
}

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// propose retries while there is no leader, as a client would.
func propose(t *testing.T, c *testCluster, cmd Command) Result {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		leader := c.waitLeader()
		res, err := c.nodes[leader].Propose(ctx(t), cmd)
		if err == nil {
			return res
		}
		if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("propose: %v", err)
		}
	}
	t.Fatal("could not propose within 30s")
	return Result{}
}

func TestClusterReplicatesAndSurvivesLeaderCrash(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	for i := range 120 { // past SnapshotEntries twice: the log is compacted
		propose(t, c, Command{Op: OpPut, Key: fmt.Sprintf("k%d", i%7), Value: []byte(fmt.Sprint(i))})
	}
	res := propose(t, c, Command{Op: OpPut, Key: "x", Value: []byte("before crash")})
	// A linearizable read on a follower goes through ReadIndex on the
	// leader; here the barrier is asked of the leader directly.
	if err := c.nodes[leader].ReadBarrier(ctx(t)); err != nil {
		t.Fatal(err)
	}
	dir := c.nodes[leader].dir
	c.crash(leader)
	newLeader := c.waitLeader()
	if newLeader == leader {
		t.Fatalf("crashed node %d still leads", leader)
	}
	if err := c.nodes[newLeader].ReadBarrier(ctx(t)); err != nil {
		t.Fatal(err)
	}
	var kv KeyValue
	c.nodes[newLeader].View(func(v View) { kv, _ = v.Get("x") })
	if string(kv.Value) != "before crash" || kv.Revision != res.Revision {
		t.Fatalf("after failover x = %q@%d, want %q@%d", kv.Value, kv.Revision, "before crash", res.Revision)
	}
	after := propose(t, c, Command{Op: OpPut, Key: "x", Value: []byte("after crash")})

	// The old leader restarts from its directory and catches up.
	back := c.restart(leader, dir)
	waitApplied(t, back, 30*time.Second, "restarted node did not catch up", func(v View) bool {
		got, _ := v.Get("x")
		return got.Revision == after.Revision
	})
}

func TestLeaseExpiresOnTheLeaderClock(t *testing.T) {
	c := newTestCluster(t, 3)
	res := propose(t, c, Command{Op: OpAcquire, Key: "L", Holder: "a", TTL: 200 * time.Millisecond})
	if res.Status != StatusOK {
		t.Fatalf("acquire: %+v", res)
	}
	// Nobody renews: the leader proposes Expire, and the lease is free
	// for the next holder, with a greater token.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r := propose(t, c, Command{Op: OpAcquire, Key: "L", Holder: "b", TTL: time.Second})
		if r.Status == StatusOK {
			if r.Token <= res.Token {
				t.Fatalf("token %d not above %d", r.Token, res.Token)
			}
			return
		}
		time.Sleep(20 * time.Millisecond) // the lease is still held: retry as a contender would
	}
	t.Fatal("lease never expired")
}

func TestAddAndRemoveMember(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	propose(t, c, Command{Op: OpPut, Key: "x", Value: []byte("1")})
	// Node 4 joins.
	raftL, httpL := freeListener(t), freeListener(t)
	c.peers[4] = raftL.Addr().String()
	c.https[4] = httpL
	cfg := DefaultConfig()
	cfg.ID, cfg.Peers, cfg.PeerListener, cfg.DataDir, cfg.Join = 4, c.peers, raftL, t.TempDir(), true
	cfg.TickInterval, cfg.HTTPAddr, cfg.Logger = 20*time.Millisecond, httpL.Addr().String(), quiet
	n4, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n4.Close()
	if err := c.nodes[leader].AddMember(ctx(t), 4, raftL.Addr().String()); err != nil {
		t.Fatalf("add member: %v", err)
	}
	deadline := time.After(30 * time.Second)
	for {
		changed := n4.StatusChanged()
		var kv KeyValue
		n4.View(func(v View) { kv, _ = v.Get("x") })
		if st := n4.Status(); string(kv.Value) == "1" && len(st.Members) == 4 && st.Members[3].Voter {
			break
		}
		if !waitAny([]<-chan struct{}{changed}, deadline) {
			break // the checks below say what is missing
		}
	}
	if st := n4.Status(); len(st.Members) != 4 || !st.Members[3].Voter {
		t.Fatalf("new node's members: %+v", st.Members)
	}
	if err := c.nodes[c.waitLeader()].RemoveMember(ctx(t), 4); err != nil {
		t.Fatalf("remove member: %v", err)
	}
	leader = c.waitLeader()
	if st := c.nodes[leader].Status(); len(st.Members) != 3 {
		t.Fatalf("members after removal: %+v", st.Members)
	}
	// The address left the replicated state with the member; removing it
	// again changes nothing and succeeds.
	waitPeers(t, c.nodes[leader], only(c.peers, 1, 2, 3))
	if err := c.nodes[leader].RemoveMember(ctx(t), 4); err != nil {
		t.Fatalf("remove a removed member: %v", err)
	}
}

// TestLaggingNodeCatchesUpBySnapshot: a follower is down while the others
// write past two compactions, so the leader no longer has the entries it
// missed and must send it a snapshot, streamed over TCP in chunks (the
// state is several megabytes).
func TestLaggingNodeCatchesUpBySnapshot(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	lagging := c.follower(leader)
	dir := lagging.dir
	laggingLast, _ := lagging.disk.LastIndex()
	c.crash(lagging.id)
	value := make([]byte, 32<<10)
	var last Result
	for i := range 120 {
		value[0] = byte(i)
		last = propose(t, c, Command{Op: OpPut, Key: fmt.Sprintf("big%d", i), Value: value})
	}
	// The entries the lagging node lacks are gone from every log.
	for _, n := range c.nodes {
		if first, _ := n.disk.FirstIndex(); first <= laggingLast+1 {
			t.Fatalf("node %d still holds index %d (first %d): no snapshot needed", n.id, laggingLast+1, first)
		}
	}
	back := c.restart(lagging.id, dir)
	waitApplied(t, back, 60*time.Second, "lagging node did not catch up", func(v View) bool {
		kv, _ := v.Get("big119")
		return kv.Revision == last.Revision && len(kv.Value) == len(value) && kv.Value[0] == 119
	})
}

// A leader that loses its quorum while a write waits answers "outcome
// unknown" (or, if it stepped down before the append, "not leader") once it
// steps down, instead of holding the caller until its deadline.
func TestProposeAnswersWhenLeadershipIsLost(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	propose(t, c, Command{Op: OpPut, Key: "x", Value: []byte("1")})
	for id := range c.peers {
		if id != leader {
			c.crash(id)
		}
	}
	pctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.nodes[leader].Propose(pctx, Command{Op: OpPut, Key: "x", Value: []byte("2")})
	if !errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Propose on a leader that lost its quorum: %v, want ErrOutcomeUnknown or ErrNotLeader", err)
	}
}

// TestLeaderRenewsWithoutARaftWrite renews a lease on the leader: the
// renewals are answered OK without a log entry (the lease record, whose
// renewal index and revision a Renew entry would move, stays as the
// acquire left it), a renewal by another holder is refused, and a renewal
// that changes the TTL goes through the log. An attempt during which the
// leader changed (the new leader may fall back to the log) is made again.
func TestLeaderRenewsWithoutARaftWrite(t *testing.T) {
	c := newTestCluster(t, 3)
	res := propose(t, c, Command{Op: OpAcquire, Key: "L", Holder: "a", TTL: time.Minute})
	if res.Status != StatusOK {
		t.Fatalf("acquire: %+v", res)
	}
	for attempt := 0; ; attempt++ {
		if attempt == 20 {
			t.Fatal("the leader changed during 20 attempts")
		}
		leader := c.nodes[c.waitLeader()]
		// Wait until the lessor has promoted (its deadline is there).
		waitApplied(t, leader, 10*time.Second, "the leader's deadline", func(v View) bool {
			_, ok := v.Remaining("L")
			return ok
		})
		before := leader.Node.Status()
		var record Lease
		leader.Node.View(func(v View) { record = v.Lease("L") })
		var err error
		for i := 0; i < 10 && err == nil; i++ {
			var r Result
			r, err = leader.Node.Propose(ctx(t), Command{Op: OpRenew, Key: "L", Holder: "a", Token: res.Token})
			if err == nil && (r.Status != StatusOK || r.Token != res.Token) {
				t.Fatalf("renew: %+v", r)
			}
		}
		after := leader.Node.Status()
		if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrOutcomeUnknown) || after.Term != before.Term || after.Leader != before.ID {
			continue
		}
		if err != nil {
			t.Fatalf("renew: %v", err)
		}
		var now Lease
		leader.Node.View(func(v View) { now = v.Lease("L") })
		if now != record {
			t.Fatalf("renewals changed the lease record from %+v to %+v: they were Raft writes", record, now)
		}
		r, err := leader.Node.Propose(ctx(t), Command{Op: OpRenew, Key: "L", Holder: "b", Token: res.Token})
		if err == nil && r.Status != StatusLost {
			t.Fatalf("renew by another holder: %+v, want lost", r)
		}
		break
	}
	r := propose(t, c, Command{Op: OpRenew, Key: "L", Holder: "a", Token: res.Token, TTL: 2 * time.Minute})
	if r.Status != StatusOK || r.TTL != 2*time.Minute || r.Revision <= res.Revision {
		t.Fatalf("renew with a new TTL: %+v, want it applied through the log", r)
	}
}

// TestStalledLeaderAnswersNoRenewal stalls the leader's disk, so that its
// Raft loop hangs in a write while its API still runs (etcd's reason for
// confirming leadership before answering a renewal, issue 15247 there). The
// other nodes elect a new leader, which expires the lease and lets another
// holder take it. Meanwhile the first holder keeps renewing on the stalled
// leader: no renewal may be answered OK whose promise (from its send time
// plus the TTL) reaches into the second holder's tenure. Without the
// ReadIndex round before a renewal, the stalled leader, whose last status
// still says it leads, answers them all.
func TestStalledLeaderAnswersNoRenewal(t *testing.T) {
	var stalled atomic.Uint64 // the ID of the node whose disk hangs
	release := make(chan struct{})
	var releaseOnce sync.Once
	unstall := func() { releaseOnce.Do(func() { close(release) }) }
	defer unstall()
	c := newTestClusterFS(t, 3, false, func(id uint64) vfs.FS {
		return vfs.NewFaultFS(vfs.OS, id, func(op vfs.Op) vfs.Fault {
			if stalled.Load() == id && (op.Kind == vfs.OpSync || op.Kind == vfs.OpWrite) {
				<-release
			}
			return vfs.NoFault
		})
	})
	t.Cleanup(unstall) // before the nodes stop (cleanups run last first)
	const ttl = time.Second
	acq := propose(t, c, Command{Op: OpAcquire, Key: "L", Holder: "a", TTL: ttl})
	if acq.Status != StatusOK {
		t.Fatalf("acquire: %+v", acq)
	}
	old := c.nodes[c.waitLeader()]
	waitApplied(t, old, 10*time.Second, "the leader's deadline", func(v View) bool {
		_, ok := v.Remaining("L")
		return ok
	})
	stalled.Store(old.id)
	go old.Node.Propose(context.Background(), Command{Op: OpPut, Key: "stall", Value: []byte("x")}) // hangs in Save

	type renewal struct{ sent, answered time.Time }
	var mu sync.Mutex
	var ok []renewal
	stop := make(chan struct{})
	renewing := make(chan struct{})
	go func() {
		defer close(renewing)
		for {
			select {
			case <-stop:
				return
			case <-time.After(ttl / 5):
			}
			rctx, cancel := context.WithTimeout(context.Background(), ttl/2)
			sent := time.Now()
			r, err := old.Node.Propose(rctx, Command{Op: OpRenew, Key: "L", Holder: "a", Token: acq.Token})
			cancel()
			if err == nil && r.Status == StatusOK {
				mu.Lock()
				ok = append(ok, renewal{sent, time.Now()})
				mu.Unlock()
			}
		}
	}()

	// Another holder takes the lease through the other nodes.
	var tenureB time.Time
	deadline := time.Now().Add(60 * time.Second)
	for tenureB.IsZero() {
		if time.Now().After(deadline) {
			t.Fatal("the other nodes never let holder b take the lease")
		}
		for id, n := range c.nodes {
			if id == old.id {
				continue
			}
			actx, cancel := context.WithTimeout(context.Background(), ttl)
			r, err := n.Node.Propose(actx, Command{Op: OpAcquire, Key: "L", Holder: "b", TTL: ttl})
			cancel()
			if err == nil && r.Status == StatusOK {
				tenureB = time.Now()
				break
			}
		}
		time.Sleep(ttl / 10) // held or no leader yet: retry, as a contender would
	}
	close(stop)
	<-renewing
	mu.Lock()
	defer mu.Unlock()
	for _, r := range ok {
		if r.sent.Add(ttl).After(tenureB) {
			t.Errorf("the stalled leader renewed the lease at %s: holder a believed it until %s, holder b took it at %s",
				r.answered.Format(time.StampMicro), r.sent.Add(ttl).Format(time.StampMicro), tenureB.Format(time.StampMicro))
		}
	}
}

// Leader, which every request asks, names what Status names: this node
// and the agreed leader, and the new one after the leader crashes.
func TestLeaderNamesWhatStatusNames(t *testing.T) {
	c := newTestCluster(t, 3)
	check := func(leader uint64) {
		t.Helper()
		for id, n := range c.nodes {
			self, lead := n.Leader()
			if st := n.Status(); self != id || self != st.ID || lead != leader {
				t.Errorf("node %d: Leader() = %d, %d; want %d, %d (Status: node %d, leader %d)", id, self, lead, id, leader, st.ID, st.Leader)
			}
		}
	}
	first := c.waitLeader()
	check(first)
	c.crash(first)
	second := c.waitLeader()
	if second == first {
		t.Fatalf("leader %d still leads after its crash", first)
	}
	check(second)
}

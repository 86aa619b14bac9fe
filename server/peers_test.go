package server

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"coord/raft"
)

func TestPeerCommandsSetAndForgetAddresses(t *testing.T) {
	a := newApplier(t)
	a.want(PeerSetCommand(4, "127.0.0.1:7004"), StatusOK)
	a.want(PeerSetCommand(5, "node-5.example:7005"), StatusOK)
	a.want(PeerSetCommand(4, "[::1]:7104"), StatusOK) // a new address replaces the old
	a.want(PeerForgetCommand(5), StatusOK)
	a.want(PeerForgetCommand(5), StatusOK) // forgetting twice is a no-op, so retries are safe
	if got, want := a.m.Peers(), map[uint64]string{4: "[::1]:7104"}; !maps.Equal(got, want) {
		t.Fatalf("peers %v, want %v", got, want)
	}
	restored := NewMachine(DefaultLimits())
	if err := restored.Restore(a.m.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if got := restored.Peers(); !maps.Equal(got, a.m.Peers()) {
		t.Fatalf("restored peers %v, want %v", got, a.m.Peers())
	}
}

// Bad peer commands are refused alike on every replica and change
// nothing; the reason says what is wrong.
func TestPeerCommandsRefuseBadInput(t *testing.T) {
	valid := PeerSetCommand(4, "127.0.0.1:7004")
	cases := map[string]struct {
		cmd    Command
		reason string
	}{
		"id 0":            {PeerSetCommand(0, "127.0.0.1:7000"), "peer id 0"},
		"forget id 0":     {PeerForgetCommand(0), "peer id 0"},
		"empty address":   {PeerSetCommand(4, ""), "want HOST:PORT"},
		"no port":         {PeerSetCommand(4, "127.0.0.1"), "want HOST:PORT"},
		"no host":         {PeerSetCommand(4, ":7004"), "names no host"},
		"port 0":          {PeerSetCommand(4, "127.0.0.1:0"), "port"},
		"port too big":    {PeerSetCommand(4, "127.0.0.1:65536"), "port"},
		"port not number": {PeerSetCommand(4, "127.0.0.1:http"), "port"},
		"long address":    {PeerSetCommand(4, strings.Repeat("a", maxPeerAddressBytes)+":1"), "limit"},
		"no value":        {Command{Op: OpPeerSet}, "peer version"},
		"version":         {Command{Op: OpPeerSet, Value: append([]byte{9}, valid.Value[1:]...)}, "peer version 9"},
		"truncated":       {Command{Op: OpPeerSet, Value: valid.Value[:len(valid.Value)-1]}, "peer address"},
		"trailing bytes":  {Command{Op: OpPeerSet, Value: append(bytes.Clone(valid.Value), 0)}, "trailing"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			a := newApplier(t)
			a.want(PeerSetCommand(1, "127.0.0.1:7001"), StatusOK)
			// want is the state before, with only the index moved on.
			want := NewMachine(DefaultLimits())
			if err := want.Restore(a.m.Snapshot()); err != nil {
				t.Fatal(err)
			}
			r := a.do(tc.cmd)
			if r.Status != StatusInvalid || !strings.Contains(r.Reason, tc.reason) {
				t.Fatalf("result %v %q, want invalid saying %q", r.Status, r.Reason, tc.reason)
			}
			want.Advance(a.index)
			if !bytes.Equal(a.m.Snapshot(), want.Snapshot()) {
				t.Fatalf("a refused command changed the state: peers %v", a.m.Peers())
			}
		})
	}
}

func TestPeerAddressesAreBounded(t *testing.T) {
	a := newApplier(t)
	for id := uint64(1); id <= maxPeers; id++ {
		a.want(PeerSetCommand(id, fmt.Sprintf("127.0.0.1:%d", id)), StatusOK)
	}
	a.want(PeerSetCommand(maxPeers+1, "127.0.0.1:9999"), StatusInvalid)
	a.want(PeerSetCommand(1, "127.0.0.2:1"), StatusOK) // a known one may still change
}

// testdata/snapshot-coordsm2.bin was written by the Machine of the commit
// before peer commands existed, which recorded addresses from membership
// changes (node 4 and 5 joined, then 5 left): it restores with them, and
// writes the same bytes again.
func TestSnapshotFromBeforePeerCommandsRestores(t *testing.T) {
	old, err := os.ReadFile("testdata/snapshot-coordsm2.bin")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMachine(DefaultLimits())
	if err := m.Restore(old); err != nil {
		t.Fatal(err)
	}
	if got, want := m.Peers(), map[uint64]string{4: "127.0.0.1:7004"}; !maps.Equal(got, want) {
		t.Fatalf("peers %v, want %v", got, want)
	}
	if kv, ok := m.Get("k"); !ok || string(kv.Value) != "v" {
		t.Fatalf("key k: %+v %v", kv, ok)
	}
	if l := m.Lease("l"); l.Holder != "h" || l.Token != 2 {
		t.Fatalf("lease l: %+v", l)
	}
	if len(m.Tokens()) != 1 || m.Applied() != 6 {
		t.Fatalf("tokens %+v, applied %d", m.Tokens(), m.Applied())
	}
	if !bytes.Equal(m.Snapshot(), old) {
		t.Fatal("the restored machine writes other bytes")
	}
	// The log goes on with peer commands.
	if r := m.ApplyCommand(7, PeerSetCommand(6, "127.0.0.1:7006")); r.Status != StatusOK {
		t.Fatalf("peer set after an old snapshot: %+v", r)
	}
}

// recordedPeers returns the addresses in n's replicated state.
func (n *testNode) recordedPeers() map[uint64]string {
	n.sm.mu.RLock()
	defer n.sm.mu.RUnlock()
	return n.sm.machine.Peers()
}

// waitPeers waits until n's replicated state holds exactly want.
func waitPeers(t *testing.T, n *testNode, want map[uint64]string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		changed := n.Changed()
		got := n.recordedPeers()
		if maps.Equal(got, want) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("node %d: replicated peer addresses %v after 30s, want %v", n.id, got, want)
		}
	}
}

// checkMembersAddressed checks that n's status names every member's
// address as want has it.
func checkMembersAddressed(t *testing.T, n *testNode, want map[uint64]string) {
	t.Helper()
	st := n.Status()
	got := map[uint64]string{}
	for _, m := range st.Members {
		got[m.ID] = m.Peer
	}
	if !maps.Equal(got, want) {
		t.Fatalf("node %d: members' addresses %v, want %v", n.id, got, want)
	}
}

// only returns peers restricted to ids.
func only(peers map[uint64]string, ids ...uint64) map[uint64]string {
	out := map[uint64]string{}
	for _, id := range ids {
		out[id] = peers[id]
	}
	return out
}

// startJoiner starts node id with Join, telling it only its own address
// and those of known; the caller adds it to the membership.
func (c *testCluster) startJoiner(id uint64, known ...uint64) *testNode {
	c.t.Helper()
	raftL := freeListener(c.t)
	c.https[id] = freeListener(c.t)
	c.peers[id] = raftL.Addr().String()
	peers := only(c.peers, append(known, id)...)
	return c.start(id, raftL, c.t.TempDir(), func(cfg *Config) { cfg.Peers, cfg.Join = peers, true })
}

// lowestFollower returns the follower with the lowest ID: it dials every
// peer above it, so it cannot rejoin without their addresses.
func (c *testCluster) lowestFollower(leader uint64) *testNode {
	var low *testNode
	for id, n := range c.nodes {
		if id != leader && (low == nil || id < low.id) {
			low = n
		}
	}
	return low
}

// writeAndWait proposes a write and waits until n applied it.
func writeAndWait(t *testing.T, c *testCluster, n *testNode, key string) {
	t.Helper()
	res := propose(t, c, Command{Op: OpPut, Key: key, Value: []byte("v")})
	waitApplied(t, n, 30*time.Second, "write "+key+" not applied", func(v View) bool {
		kv, ok := v.Get(key)
		return ok && kv.Revision >= res.Revision
	})
}

// The addresses of the initial members (from the first leader) and of an
// added one (from AddMember) are in the log: a new member told only its
// own address and the leader's learns the others from it, and so does a
// node restarted with nothing but its own address.
func TestMembersLearnPeerAddressesFromTheLog(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	initial := maps.Clone(c.peers)
	for _, n := range c.nodes {
		waitPeers(t, n, initial)
	}

	n4 := c.startJoiner(4, leader)
	if err := c.nodes[leader].AddMember(ctx(t), 4, c.peers[4]); err != nil {
		t.Fatalf("add member: %v", err)
	}
	for _, n := range c.nodes {
		waitPeers(t, n, c.peers)
	}
	if snap, err := n4.disk.Snapshot(); err != nil || !snap.IsEmpty() {
		t.Fatalf("the new member got a snapshot (%v, %v): this test is about the log", snap.Metadata, err)
	}
	writeAndWait(t, c, n4, "after-join")
	checkMembersAddressed(t, n4, c.peers)

	low := c.lowestFollower(c.waitLeader())
	id, dir := low.id, low.dir
	c.crash(id)
	back := c.restart(id, dir, func(cfg *Config) { cfg.Peers = only(c.peers, id) })
	waitPeers(t, back, c.peers)
	writeAndWait(t, c, back, "after-restart")
	checkMembersAddressed(t, back, c.peers)
}

// Once the entries that set the addresses are compacted away, the
// snapshot carries them: to a new member that the leader must send a
// snapshot, and to a node restarted from its own.
func TestMembersLearnPeerAddressesFromTheSnapshot(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	for _, n := range c.nodes {
		waitPeers(t, n, c.peers)
	}
	recordedBy := c.nodes[leader].Status().Applied
	for i := range 120 { // past two compactions (SnapshotEntries is 50)
		propose(t, c, Command{Op: OpPut, Key: fmt.Sprintf("k%d", i), Value: []byte("v")})
	}

	leader = c.waitLeader()
	n4 := c.startJoiner(4, leader)
	if err := c.nodes[leader].AddMember(ctx(t), 4, c.peers[4]); err != nil {
		t.Fatalf("add member: %v", err)
	}
	waitPeers(t, n4, c.peers)
	if snap, err := n4.disk.Snapshot(); err != nil || snap.Metadata.Index <= recordedBy {
		t.Fatalf("the new member's snapshot is at %d (%v), before the addresses (%d): this test is about snapshots",
			snap.Metadata.Index, err, recordedBy)
	}
	writeAndWait(t, c, n4, "after-join")
	checkMembersAddressed(t, n4, c.peers)

	low := c.lowestFollower(c.waitLeader())
	id, dir := low.id, low.dir
	c.crash(id)
	back := c.restart(id, dir, func(cfg *Config) { cfg.Peers = only(c.peers, id) })
	if first, err := back.disk.FirstIndex(); err != nil || first <= recordedBy {
		t.Fatalf("node %d's log starts at %d (%v), before the addresses (%d): this test is about snapshots", id, first, err, recordedBy)
	}
	waitPeers(t, back, c.peers)
	writeAndWait(t, c, back, "after-restart")
	checkMembersAddressed(t, back, c.peers)
}

// A coord from before peer commands put a joining member's address in the
// Context of the membership change. Such a log still works: the nodes dial
// the address, and the leader records it in the replicated state.
func TestAddressFromAnOldMembershipChangeIsRecorded(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	n4 := c.startJoiner(4, leader)
	addr4 := c.peers[4]
	// What AddMember wrote before: two changes, the address in Context.
	for _, typ := range []raft.ConfChangeType{raft.ConfChangeAddLearner, raft.ConfChangeAddVoter} {
		cc := raft.ConfChange{Changes: []raft.ConfChangeSingle{{Type: typ, NodeID: 4}}, Context: []byte(addr4)}
		if err := c.nodes[leader].changeMembership(ctx(t), cc); err != nil {
			t.Fatalf("old-style membership change: %v", err)
		}
	}
	for _, n := range c.nodes {
		waitPeers(t, n, c.peers)
	}
	writeAndWait(t, c, n4, "after-old-join")
}

func TestAddMemberRefusesBadRequests(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.nodes[c.waitLeader()]
	for name, tc := range map[string]struct {
		id   uint64
		peer string
		want string
	}{
		"no id":        {0, "127.0.0.1:7009", "required"},
		"no address":   {9, "", "required"},
		"bad address":  {9, "127.0.0.1", "HOST:PORT"},
		"no host":      {9, ":7009", "names no host"},
		"voter":        {1, "127.0.0.1:7009", "voter already"},
		"long address": {9, strings.Repeat("h", 400) + ":1", "over the limit"},
	} {
		err := n.AddMember(ctx(t), tc.id, tc.peer)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", name, err, tc.want)
		}
	}
	if got, ok := n.recordedPeers()[9]; ok {
		t.Fatalf("a refused request recorded address %q", got)
	}
}

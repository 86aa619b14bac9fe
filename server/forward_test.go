package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"coord/api"
	"coord/storage/vfs"
)

// newForwardCluster is newTestClusterFS with apiCfg for every node's API.
func newForwardCluster(t *testing.T, size int, apiCfg APIConfig, fsFor func(id uint64) vfs.FS) *testCluster {
	c := &testCluster{t: t, peers: map[uint64]string{}, https: map[uint64]net.Listener{}, nodes: map[uint64]*testNode{},
		fsFor: fsFor, apiConfig: apiCfg}
	c.startNodes(size)
	return c
}

// callAs makes one API request with an optional bearer token.
func callAs(t *testing.T, method, url, token, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set(api.HeaderAuthorization, "Bearer "+token)
	}
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return reply{code: resp.StatusCode, header: resp.Header, body: decodeBody(raw)}
}

// waitPeerConnected waits until n's Raft transport is connected to peer,
// the condition for forwarding writes over it.
func waitPeerConnected(t testing.TB, n *testNode, peer uint64) {
	t.Helper()
	waitPeerState(t, n, peer, true)
}

// waitPeerState waits until n's Raft transport is connected to peer
// (connected) or not, looking again at each change the transport tells.
func waitPeerState(t testing.TB, n *testNode, peer uint64, connected bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		changed := n.tr.PeersChanged()
		if _, ok := n.tr.PeerMeta(peer); ok == connected {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("node %d's connection to %d never became connected=%v", n.id, peer, connected)
		}
	}
}

// Writes sent to a follower reach the leader as Raft proposals, not HTTP
// requests (the leader's API is shut here), apply exactly once, are read
// back at the leader with the revisions the follower answered, and retries
// in a session get the first answer again.
func TestFollowerWritesGoToTheLeaderAsRaftProposals(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	f := c.follower(leader)
	waitPeerConnected(t, f, leader)
	c.nodes[leader].srv.Close() // no HTTP forwarding possible
	const writes = 20
	revisions := map[string]uint64{}
	for i := range writes {
		key := fmt.Sprintf("fw/%d", i)
		r := callAs(t, "PUT", fmt.Sprintf("%s/v1/kv/%s?client_id=77&seq=%d", f.httpURL, key, i+1), "", "v"+key)
		if r.code != http.StatusOK {
			t.Fatalf("PUT %s through follower %d: %d %v", key, f.id, r.code, r.body)
		}
		revisions[key] = uint64(r.body["revision"].(float64))
	}
	// A retry of seq 1 in the session: the first answer, not a new write.
	if r := callAs(t, "PUT", f.httpURL+"/v1/kv/fw/0?client_id=77&seq=1", "", "vfw/0"); r.code != http.StatusOK ||
		uint64(r.body["revision"].(float64)) != revisions["fw/0"] {
		t.Fatalf("retry of seq 1 through the follower: %d %v, want revision %d", r.code, r.body, revisions["fw/0"])
	}
	// A failed condition: the follower's own Apply computes the conflict.
	if r := callAs(t, "PUT", f.httpURL+"/v1/kv/fw/1?prev_revision=0", "", "again"); r.code != http.StatusConflict ||
		uint64(r.body["revision"].(float64)) != revisions["fw/1"] {
		t.Fatalf("create-only PUT of an existing key through the follower: %d %v, want 409 at revision %d", r.code, r.body, revisions["fw/1"])
	}
	// Leases and deletes too.
	acq := callAs(t, "POST", f.httpURL+"/v1/leases/fl/acquire", "", `{"holder":"h","ttl_ms":60000}`)
	if acq.code != http.StatusOK {
		t.Fatalf("acquire through the follower: %d %v", acq.code, acq.body)
	}
	rel := callAs(t, "POST", f.httpURL+"/v1/leases/fl/release", "", fmt.Sprintf(`{"holder":"h","token":%d}`, uint64(acq.body["token"].(float64))))
	if rel.code != http.StatusOK {
		t.Fatalf("release through the follower: %d %v", rel.code, rel.body)
	}
	if r := callAs(t, "DELETE", f.httpURL+"/v1/kv/fw/19", "", ""); r.code != http.StatusOK {
		t.Fatalf("DELETE through the follower: %d %v", r.code, r.body)
	}
	l := c.nodes[leader]
	waitApplied(t, l, 30*time.Second, "the follower's writes", func(v View) bool {
		_, ok := v.Get("fw/19")
		return !ok
	})
	l.View(func(v View) {
		for i := range writes - 1 {
			key := fmt.Sprintf("fw/%d", i)
			kv, ok := v.Get(key)
			if !ok || string(kv.Value) != "v"+key || kv.Version != 1 || kv.Revision != revisions[key] {
				t.Errorf("leader: %s = %+v (present %v), want %q written once at revision %d", key, kv, ok, "v"+key, revisions[key])
			}
		}
		if lease := v.Lease("fl"); lease.Held() {
			t.Errorf("leader: lease fl still held by %q after its release through the follower", lease.Holder)
		}
	})
}

// A token revoked in the log before a forwarded write refuses it, even
// though the follower that took the write still knew the token: the state
// machine decides at the write's position in the log (Machine.authorize).
func TestForwardedWriteRefusedByATokenRevokedBeforeIt(t *testing.T) {
	c := newForwardCluster(t, 3, APIConfig{Auth: true}, nil)
	leader := c.waitLeader()
	l, f := c.nodes[leader], c.follower(leader)
	waitPeerConnected(t, f, leader)
	makeToken := func(tok Token) (string, uint64) {
		secret, err := NewTokenSecret()
		if err != nil {
			t.Fatal(err)
		}
		tok.Hash = HashToken(secret)
		res := propose(t, c, TokenCreateCommand(tok))
		if res.Status != StatusOK {
			t.Fatalf("token create: %+v", res)
		}
		waitApplied(t, f, 30*time.Second, "the token", func(v View) bool { _, ok := v.Token(tok.Hash); return ok })
		return secret, res.Revision
	}

	// Through the follower's API, a write with a good token works.
	secret, id := makeToken(Token{Role: TokenWrite})
	if r := callAs(t, "PUT", f.httpURL+"/v1/kv/a", secret, "1"); r.code != http.StatusOK {
		t.Fatalf("PUT with a write token through the follower: %d %v", r.code, r.body)
	}

	// The follower checked the token and forwards a write carrying its
	// hash; the token's revocation is in the log before the write.
	if res := propose(t, c, TokenRevokeCommand(id)); res.Status != StatusOK {
		t.Fatalf("revoke: %+v", res)
	}
	cmd := Command{Op: OpPut, Key: "a", Value: []byte("2"), HasAuth: true, AuthHash: HashToken(secret)}
	res, err := f.ProposeForwarded(ctx(t), cmd)
	if err != nil || res.Status != StatusUnauthenticated {
		t.Fatalf("forwarded write with a token revoked before it: %+v, %v; want %v", res, err, StatusUnauthenticated)
	}

	// Through the API, revoked just before the write: refused (by the
	// follower's check or by the log's, whichever saw it first).
	secret2, id2 := makeToken(Token{Role: TokenWrite})
	if res := propose(t, c, TokenRevokeCommand(id2)); res.Status != StatusOK {
		t.Fatalf("revoke: %+v", res)
	}
	if r := callAs(t, "PUT", f.httpURL+"/v1/kv/a", secret2, "3"); r.code != http.StatusUnauthorized {
		t.Fatalf("PUT with a token revoked just before, through the follower: %d %v, want 401", r.code, r.body)
	}
	// A prefix-limited token: forbidden outside its prefix, at the log.
	secret3, _ := makeToken(Token{Role: TokenWrite, KeyPrefix: "app/"})
	cmd = Command{Op: OpPut, Key: "a", Value: []byte("4"), HasAuth: true, AuthHash: HashToken(secret3)}
	if res, err := f.ProposeForwarded(ctx(t), cmd); err != nil || res.Status != StatusForbidden {
		t.Fatalf("forwarded write outside the token's prefix: %+v, %v; want %v", res, err, StatusForbidden)
	}
	// Everything the follower applied is committed: a read barrier on
	// the leader returns once the leader applied it too. (Not a wait on
	// Changed and Status().Applied: the state machine signals a change
	// before the handler counts the entry applied, so that wait can miss
	// its wake-up.)
	if err := l.ReadBarrier(ctx(t)); err != nil {
		t.Fatalf("read barrier on the leader: %v", err)
	}
	l.View(func(v View) {
		if kv, _ := v.Get("a"); string(kv.Value) != "1" || kv.Version != 1 {
			t.Fatalf("leader: a = %q version %d, want only the first write", kv.Value, kv.Version)
		}
	})
}

// A follower whose leader is killed while a forwarded write is in flight
// answers unknown_outcome, never a false success: the leader's disk is
// full, so the write cannot commit with it (the leader holds its Ready and
// takes no more messages), and the next leader may or may not commit it,
// if the appends the leader sent ahead reached a follower.
func TestFollowerAnswersUnknownOutcomeWhenItsLeaderDies(t *testing.T) {
	var full atomic.Uint64 // the node whose disk is full
	c := newForwardCluster(t, 3, APIConfig{}, func(id uint64) vfs.FS {
		return vfs.NewFaultFS(vfs.OS, id, func(op vfs.Op) vfs.Fault {
			if full.Load() == id && op.Kind == vfs.OpWrite {
				return vfs.FaultNoSpace
			}
			return vfs.NoFault
		})
	})
	leader := c.waitLeader()
	f := c.follower(leader)
	waitPeerConnected(t, f, leader)
	propose(t, c, Command{Op: OpPut, Key: "warm", Value: []byte("x")})
	for _, n := range c.nodes {
		waitApplied(t, n, 30*time.Second, "the first write", func(v View) bool { _, ok := v.Get("warm"); return ok })
	}

	full.Store(leader)
	answer := make(chan reply, 1)
	go func() { answer <- callAs(t, "PUT", f.httpURL+"/v1/kv/mid", "", "1") }()
	// Kill the leader once the follower forwarded the write: it was
	// handed to the follower's loop, and a request through the loop after
	// it (a leadership transfer, refused at once on a follower) returns
	// once the Ready that sends it was handled.
	waitCount(t, "writes handed to the follower's loop", f.sm.forwards, &f.sm.forwards.handed, 1)
	_ = f.shell.TransferLeadership(context.Background(), f.id)
	c.crash(leader)
	r := <-answer
	t.Logf("answer: %d %v", r.code, r.body)
	next := c.waitLeader()
	propose(t, c, Command{Op: OpPut, Key: "after", Value: []byte("x")})
	applied := map[uint64]bool{}
	for id, n := range c.nodes {
		waitApplied(t, n, 30*time.Second, "the write after", func(v View) bool { _, ok := v.Get("after"); return ok })
		n.View(func(v View) { _, applied[id] = v.Get("mid") })
	}
	if applied[next] != applied[f.id] {
		t.Fatalf("the survivors disagree on the write: leader %v, follower %v", applied[next], applied[f.id])
	}
	switch {
	case r.code == http.StatusServiceUnavailable && r.body["code"] == string(api.CodeUnknownOutcome):
	case r.code == http.StatusOK && applied[f.id]:
		// The next leader committed it, and the follower applied it
		// before it saw the leader change: a true success.
	default:
		t.Fatalf("write through the follower whose leader died: %d %v (applied: %v), want unknown_outcome", r.code, r.body, applied[f.id])
	}
}

// A follower with no leader refuses a write at once, as unavailable: it
// sent it nowhere.
func TestFollowerWithoutLeaderRefusesWrites(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	f := c.follower(leader)
	// The other follower first, then the leader: crashed the other way
	// round, the two followers could elect one of them, and a vote on its
	// way when the second crash came could still make the follower a
	// leader of nobody (then its write is appended, never committed).
	for id := range c.peers {
		if id != f.id && id != leader {
			c.crash(id)
		}
	}
	c.crash(leader)
	// Wait until the follower no longer believes in a leader. The change
	// channel is taken before the status is read, so that a change in
	// between is not missed (a pre-candidate's failed rounds change
	// nothing more to wake on).
	deadline := time.After(30 * time.Second)
	for {
		changed := f.StatusChanged()
		if f.Status().Leader == 0 {
			break
		}
		if !waitAny([]<-chan struct{}{changed}, deadline) {
			t.Fatal("the follower kept its leader")
		}
	}
	if st := f.Status(); st.Role == api.RoleLeader {
		t.Fatalf("the follower leads, with no quorum to elect it: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := f.ProposeForwarded(ctx, Command{Op: OpPut, Key: "x", Value: []byte("1")})
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("ProposeForwarded with no leader: %v, want ErrNotLeader", err)
	}
	if r := callAs(t, "PUT", f.httpURL+"/v1/kv/x", "", "1"); r.body["code"] != string(api.CodeUnavailable) {
		t.Fatalf("PUT on a follower with no leader: %d %v, want unavailable", r.code, r.body)
	}
}

// A renewal sent to a follower still reaches the leader over HTTP, which
// answers it without a Raft write (Node.renewOnLeader): the lease's
// revision does not move.
func TestRenewalThroughAFollowerIsAnsweredByTheLeader(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	f := c.follower(leader)
	waitPeerConnected(t, f, leader)
	acq := callAs(t, "POST", f.httpURL+"/v1/leases/rl/acquire", "", `{"holder":"h","ttl_ms":60000}`)
	if acq.code != http.StatusOK {
		t.Fatalf("acquire through the follower: %d %v", acq.code, acq.body)
	}
	l := c.nodes[leader]
	waitApplied(t, l, 30*time.Second, "the leader's deadline", func(v View) bool {
		_, ok := v.Remaining("rl")
		return ok
	})
	token := uint64(acq.body["token"].(float64))
	r := callAs(t, "POST", f.httpURL+"/v1/leases/rl/renew", "", fmt.Sprintf(`{"holder":"h","token":%d}`, token))
	if r.code != http.StatusOK || r.body["revision"] != acq.body["revision"] {
		t.Fatalf("renew through the follower: %d %v, want 200 at the acquire's revision %v (no Raft write)", r.code, r.body, acq.body["revision"])
	}
}

package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"coord/api"
	"coord/raft"
)

// The candidate's write path end to end, over real TCP on loopback: a
// request that reaches a node while it campaigns, held by it for the
// election's outcome (campaign.go). The node is made a candidate by a
// leadership transfer while the other two nodes' disks are frozen
// (freezer): each stops in the write of its vote for it, so the election
// stays undecided until the test releases them, and what reaches the
// candidate meanwhile reaches a candidate, whatever the machine's load.

// Trace messages the candidate logs, which the tests wait on.
const (
	traceHeld    = "trace: write held by the candidate"    // Node.ProposeAtElection
	traceAwaited = "trace: request waits for the election" // Node.AwaitElection
)

// traceHook is a slog.Handler that counts the records of each message, so
// that a test can wait for the event a trace line marks. Safe for
// concurrent use.
type traceHook struct {
	mu      sync.Mutex
	counts  map[string]int
	changed chan struct{} // closed and replaced at every record
}

func newTraceHook() *traceHook {
	return &traceHook{counts: map[string]int{}, changed: make(chan struct{})}
}

func (h *traceHook) Enabled(context.Context, slog.Level) bool { return true }

func (h *traceHook) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[r.Message]++
	close(h.changed)
	h.changed = make(chan struct{})
	return nil
}

func (h *traceHook) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *traceHook) WithGroup(string) slog.Handler      { return h }

// wait waits until message was logged want times at least.
func (h *traceHook) wait(t *testing.T, message string, want int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		h.mu.Lock()
		got, changed := h.counts[message], h.changed
		h.mu.Unlock()
		if got >= want {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%q logged %d times, never %d", message, got, want)
		}
	}
}

// startWithCandidate starts three nodes on z's file systems, each with
// apiCfg for its API, and node 3, the candidate to be, patient (it never
// campaigns on its own, and it leads with no timer running out) and
// logging to hook, then changed by candidate (nil: nothing more). It
// waits for a leader, for node 3's connections to the others and for a
// first entry applied everywhere, and returns the cluster, its leader and
// node 3.
func startWithCandidate(t *testing.T, z *freezer, hook *traceHook, apiCfg APIConfig, candidate func(*Config)) (c *testCluster, l, f *testNode) {
	t.Helper()
	c = &testCluster{t: t, peers: map[uint64]string{}, https: map[uint64]net.Listener{}, nodes: map[uint64]*testNode{},
		fsFor: z.fs, apiConfig: apiCfg, configFor: func(id uint64, cfg *Config) {
			if id != 3 {
				return
			}
			patient(cfg)
			cfg.Logger = slog.New(hook)
			if candidate != nil {
				candidate(cfg)
			}
		}}
	c.startNodes(3)
	t.Cleanup(z.releaseAll) // registered after startNodes' cleanup, so run before it
	leader := c.waitLeader()
	l, f = c.nodes[leader], c.nodes[3]
	for id, n := range c.nodes {
		if id != f.id {
			waitPeerConnected(t, f, id)
		}
		// The new leader proposes the members' addresses in the
		// background (Node.proposeMissingPeers): once they are applied it
		// proposes nothing of its own, and a freeze stops it where the
		// test says.
		waitApplied(t, n, 30*time.Second, "every member's address", func(v View) bool {
			return len(v.(nodeView).s.machine.Peers()) == len(c.nodes) // under View's lock
		})
	}
	writeEverywhere(t, c, "warm")
	return c, l, f
}

// makeCandidate makes f a candidate that has not won yet: it freezes the
// other nodes, has leader l hand over to f, and waits until each of them
// stopped in the write of its vote (which it sends after the write). f's
// last log index then is returned.
func makeCandidate(t *testing.T, c *testCluster, z *freezer, l, f *testNode) (lastIndex uint64) {
	t.Helper()
	// A node applies committed entries before it writes their commit
	// index (node.Handler.applyAhead): the leader may still be in that
	// write after writeEverywhere. A read round ends after it, and the
	// leader has nothing more to write: frozen from now, it takes the
	// transfer. (A frozen follower may stop in such a write first: its
	// vote waits all the same.)
	if err := l.ReadBarrier(ctx(t)); err != nil {
		t.Fatalf("read barrier on the leader: %v", err)
	}
	var voters []uint64
	for id := range c.nodes {
		if id != f.id {
			voters = append(voters, id)
			z.freeze(id)
		}
	}
	if err := l.shell.TransferLeadership(ctx(t), f.id); err != nil {
		t.Fatalf("transfer from %d to %d: %v", l.id, f.id, err)
	}
	deadline := time.After(30 * time.Second)
	for {
		changed := f.shell.RoleChanged()
		st := f.shell.Status()
		if st.Role == raft.Candidate && st.Lead == 0 {
			break
		}
		if !waitAny([]<-chan struct{}{changed}, deadline) {
			t.Fatalf("node %d is %v (leader %d) after the transfer to it, never a candidate", f.id, st.Role, st.Lead)
		}
	}
	for _, id := range voters {
		z.waitBlocked(t, id)
	}
	st := f.shell.Status()
	if st.Role != raft.Candidate || st.Lead != 0 {
		t.Fatalf("node %d is %v (leader %d) with its voters frozen, want a candidate", f.id, st.Role, st.Lead)
	}
	return st.LastIndex
}

// requestAsync makes one API request, with a bearer token if token is
// not empty, on its own goroutine, and returns the channel its reply
// arrives on (code 0 if the request failed, which fails the test).
func requestAsync(t *testing.T, method, url, token, body string) <-chan reply {
	answer := make(chan reply, 1)
	go func() {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Error(err)
			answer <- reply{}
			return
		}
		if token != "" {
			req.Header.Set(api.HeaderAuthorization, "Bearer "+token)
		}
		resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
		if err != nil {
			t.Errorf("%s %s: %v", method, url, err)
			answer <- reply{}
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		answer <- reply{code: resp.StatusCode, header: resp.Header, body: decodeBody(raw)}
	}()
	return answer
}

// A write that reaches a candidate is held (node.Handler.ProposeAtElection)
// and appended with the new leader's first entry when it wins: the client
// is answered 200, and every node applied the write once, at the index
// right after that entry.
func TestWriteHeldByACandidateIsAppliedOnceWhenItWins(t *testing.T) {
	z, hook := newFreezer(), newTraceHook()
	c, l, f := startWithCandidate(t, z, hook, APIConfig{}, nil)
	last := makeCandidate(t, c, z, l, f)

	answer := requestAsync(t, "PUT", f.httpURL+"/v1/kv/held", "", "1")
	hook.wait(t, traceHeld, 1)
	z.releaseAll() // the voters' votes go out: f wins
	r := <-answer
	if r.code != http.StatusOK {
		t.Fatalf("write held by the candidate that won: %d %v, want 200", r.code, r.body)
	}
	revision := uint64(r.body["revision"].(float64))
	if want := last + 2; revision != want {
		t.Errorf("held write at revision %d, want %d: right after the new leader's first entry at %d", revision, want, last+1)
	}
	if st := f.Status(); st.Leader != f.id {
		t.Errorf("node %d answered the held write, but the leader is %d", f.id, st.Leader)
	}
	writeEverywhere(t, c, "after")
	for id, n := range c.nodes {
		n.View(func(v View) {
			if kv, ok := v.Get("held"); !ok || string(kv.Value) != "1" || kv.Version != 1 || kv.Revision != revision {
				t.Errorf("node %d: held = %+v (present %v), want written once at revision %d", id, kv, ok, revision)
			}
		})
	}
}

// A write held by a candidate that does not win (within an election
// timeout, node.ErrNotElected) was appended nowhere: with no leader known,
// the client is refused with unavailable (not leader), and no node ever
// applies the write. The candidate's election timeout is 3 to 6 s here,
// the voters stay frozen until it answered.
func TestWriteHeldByACandidateThatIsNotElectedIsRefused(t *testing.T) {
	z, hook := newFreezer(), newTraceHook()
	c, l, f := startWithCandidate(t, z, hook, APIConfig{}, func(cfg *Config) {
		cfg.ElectionTicks = 150 // × 20 ms
		cfg.HeartbeatTicks = 1
	})
	makeCandidate(t, c, z, l, f)

	answer := requestAsync(t, "PUT", f.httpURL+"/v1/kv/lost", "", "1")
	hook.wait(t, traceHeld, 1)
	r := <-answer
	if r.code != http.StatusServiceUnavailable || r.body["code"] != string(api.CodeUnavailable) {
		t.Fatalf("write held by a candidate that was not elected: %d %v, want 503 unavailable", r.code, r.body)
	}
	if st := f.shell.Status(); st.Role == raft.Leader {
		t.Fatalf("node %d leads with its voters frozen", f.id)
	}

	z.releaseAll()
	writeEverywhere(t, c, "after")
	for id, n := range c.nodes {
		n.View(func(v View) {
			if kv, ok := v.Get("lost"); ok {
				t.Errorf("node %d applied the write refused to its client: %+v", id, kv)
			}
		})
	}
}

// A renewal that reaches a candidate waits for the election
// (Node.AwaitElection), checked against the tokens the candidate applied
// then. If its token is revoked before it is answered (here by a
// revocation the same candidate held, committed with its first entry as
// the new leader), the renewal is refused: the leader checks the token
// again against the state it answers from (Node.renewOnLeader).
func TestRenewalThatWaitedForTheElectionRechecksItsToken(t *testing.T) {
	z, hook := newFreezer(), newTraceHook()
	c, l, f := startWithCandidate(t, z, hook, APIConfig{Auth: true}, nil)
	makeToken := func(tok Token) (string, uint64) {
		t.Helper()
		secret, err := NewTokenSecret()
		if err != nil {
			t.Fatal(err)
		}
		tok.Hash = HashToken(secret)
		res := propose(t, c, TokenCreateCommand(tok))
		if res.Status != StatusOK {
			t.Fatalf("token create: %+v", res)
		}
		return secret, res.Revision
	}
	admin, _ := makeToken(Token{Role: TokenAdmin})
	writer, writerID := makeToken(Token{Role: TokenWrite})
	acq := callAs(t, "POST", l.httpURL+"/v1/leases/rt/acquire", writer, `{"holder":"h","ttl_ms":60000}`)
	if acq.code != http.StatusOK {
		t.Fatalf("acquire: %d %v", acq.code, acq.body)
	}
	token := uint64(acq.body["token"].(float64))
	writeEverywhere(t, c, "tokens") // f applied both tokens and the lease
	makeCandidate(t, c, z, l, f)

	revoked := requestAsync(t, "DELETE", fmt.Sprintf("%s/v1/auth/tokens/%d", f.httpURL, writerID), admin, "")
	hook.wait(t, traceHeld, 1)
	renewed := requestAsync(t, "POST", f.httpURL+"/v1/leases/rt/renew", writer, fmt.Sprintf(`{"holder":"h","token":%d}`, token))
	hook.wait(t, traceAwaited, 1)
	z.releaseAll()
	if r := <-revoked; r.code != http.StatusOK {
		t.Fatalf("revocation held by the candidate: %d %v, want 200", r.code, r.body)
	}
	if r := <-renewed; r.code != http.StatusUnauthorized {
		t.Fatalf("renewal with a token revoked while it waited for the election: %d %v, want 401", r.code, r.body)
	}
}

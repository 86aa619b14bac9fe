package server

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"coord/api"
	"coord/raft"
	"coord/transport/tcp"
)

// A process started with a member's ID (a misconfiguration) connects to the
// leader over TCP and claims leadership of the leader's own term with a
// heartbeat. The leader used to panic (an assertion of Election Safety);
// now it refuses the message, counts it in
// coord_raft_invalid_messages_total, and goes on leading.
func TestLeaderRefusesAHeartbeatFromADuplicateID(t *testing.T) {
	c := newTestClusterOf(t, 3, true)
	leader := c.waitLeader()
	// The impostor takes node 1's ID, so node 1 must be down, and must not
	// lead: the node with the lower ID dials, so the impostor (1) dials the
	// leader, whose answers come back on that connection.
	c.crash(1)
	if leader == 1 {
		leader = c.waitLeader()
	}
	st := c.nodes[leader].Status()
	if st.Role != api.RoleLeader || st.Term < 2 {
		t.Fatalf("node %d: %+v, want a leader of term 2 or later", leader, st)
	}
	responses := make(chan raft.Message, 64)
	cfg := tcp.DefaultConfig()
	cfg.ID, cfg.Listener, cfg.Logger = 1, freeListener(t), quiet
	cfg.Peers = map[uint64]string{leader: c.peers[leader]}
	cfg.Deliver = func(m raft.Message) {
		if m.Type == raft.MsgAppendResponse {
			select {
			case responses <- m:
			default:
			}
		}
	}
	impostor, err := tcp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer impostor.Close()
	// The forged heartbeat, then an append of an older term, which the
	// leader answers: messages on one connection are stepped in order, so
	// the answer means the heartbeat was stepped first. A send before the
	// connection is up is dropped, so send again until answered.
	forged := []raft.Message{
		{Type: raft.MsgHeartbeatRequest, From: 1, To: leader, Term: st.Term},
		{Type: raft.MsgAppendRequest, From: 1, To: leader, Term: st.Term - 1},
	}
	deadline := time.After(30 * time.Second)
	for answered := false; !answered; {
		impostor.Send(forged)
		select {
		case <-responses:
			answered = true
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("the leader never answered the impostor")
		}
	}
	if now := c.nodes[leader].Status(); now.Role != api.RoleLeader || now.Term != st.Term {
		t.Fatalf("after the forged heartbeat node %d is %+v, want still leader of term %d", leader, now, st.Term)
	}
	rec := httptest.NewRecorder()
	c.nodes[leader].metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if !strings.Contains(string(body), `coord_raft_invalid_messages_total{type="HeartbeatRequest"}`) {
		t.Fatalf("metrics lack the refused heartbeat:\n%s", grepLines(string(body), "coord_raft_"))
	}
	propose(t, c, Command{Op: OpPut, Key: "after", Value: []byte("impostor")})
}

func grepLines(s, substr string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

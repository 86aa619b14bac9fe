package localcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawNode sends API requests to one node only, as a client pinned to it:
// the test must know which node answered.
type rawNode struct {
	t      *testing.T
	base   string
	token  string
	client *http.Client
}

func pinned(t *testing.T, c *Cluster, id uint64) rawNode {
	t.Helper()
	n, err := c.node(id)
	if err != nil {
		t.Fatal(err)
	}
	access := c.Access()
	scheme, client := "http", &http.Client{Timeout: 20 * time.Second}
	if access.TLS != nil {
		scheme = "https"
		client.Transport = &http.Transport{TLSClientConfig: access.TLS}
	}
	t.Cleanup(client.CloseIdleConnections)
	return rawNode{t: t, base: scheme + "://" + n.HTTP, token: access.Token, client: client}
}

// do sends one request and returns the status and body.
func (n rawNode) do(method, path, body string) (int, string) {
	n.t.Helper()
	req, err := http.NewRequest(method, n.base+path, strings.NewReader(body))
	if err != nil {
		n.t.Fatal(err)
	}
	if n.token != "" {
		req.Header.Set("Authorization", "Bearer "+n.token)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		n.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, string(b)
}

// value returns the value of a 200 answer to a key GET.
func value(t *testing.T, body string) string {
	t.Helper()
	var kv struct{ Value string }
	if err := json.Unmarshal([]byte(body), &kv); err != nil {
		t.Fatalf("key body %q: %v", body, err)
	}
	return kv.Value
}

// localReads returns the node's count of linearizable reads it served
// itself, from its metrics.
func (n rawNode) localReads() int {
	n.t.Helper()
	code, body := n.do("GET", "/metrics", "")
	if code != http.StatusOK {
		n.t.Fatalf("metrics: %d %s", code, body)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), `coord_server_linearizable_reads_total{served="local"} `); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				n.t.Fatalf("metric line %q: %v", sc.Text(), err)
			}
			return int(v)
		}
	}
	return 0
}

// A follower answers linearizable reads itself, after asking the leader
// for a read index over the peer transport: each read through the follower
// sees the write the leader acknowledged just before it, and the follower's
// metrics count the reads as its own (not forwarded). Cut off from the
// leader, it never answers a linearizable read with the value it still
// holds (which a stale read shows): it answers 503, or the leader's value
// by forwarding. Healed, it serves the new value.
func TestFollowerServesLinearizableReads(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	leaderID, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	followerID := c.Except(leaderID)[0]
	leader, follower := pinned(t, c, leaderID), pinned(t, c, followerID)
	const key = "/v1/kv/fread-key"
	const writes = 40
	before := follower.localReads()
	for i := range writes {
		want := fmt.Sprintf("v%d", i)
		if code, body := leader.do("PUT", key, want); code != http.StatusOK {
			t.Fatalf("put %s through leader %d: %d %s", want, leaderID, code, body)
		}
		code, body := follower.do("GET", key, "")
		if code != http.StatusOK || value(t, body) != want {
			t.Fatalf("linearizable get through follower %d after the put of %s was acknowledged: %d %s", followerID, want, code, body)
		}
	}
	// A leader change under load (the machine is shared) can make a read
	// or two forward, which is correct too; most must be the follower's.
	if got := follower.localReads() - before; got < writes/2 {
		t.Fatalf("follower %d served %d of %d linearizable reads itself; the others were forwarded", followerID, got, writes)
	}
	// A lease read through the follower still has remaining_ms, the time
	// left by the leader's clock: the follower forwards lease reads.
	if code, body := leader.do("POST", "/v1/leases/fread-lease/acquire", `{"holder":"a","ttl_ms":60000}`); code != http.StatusOK {
		t.Fatalf("acquire: %d %s", code, body)
	}
	if code, body := follower.do("GET", "/v1/leases/fread-lease", ""); code != http.StatusOK || !strings.Contains(body, `"remaining_ms"`) {
		t.Fatalf("lease read through follower %d: %d %s, want remaining_ms", followerID, code, body)
	}

	// Cut the follower off; the majority takes a new write.
	if err := c.Isolate(followerID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitLeader(ctx, c.Except(followerID)...); err != nil {
		t.Fatal(err)
	}
	for {
		code, body := leader.do("PUT", key, "after")
		if code == http.StatusOK {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("put after the partition: %d %s", code, body)
		}
		leaderID, _ = c.WaitLeader(ctx, c.Except(followerID)...)
		leader = pinned(t, c, leaderID)
	}
	if code, body := follower.do("GET", key+"?stale=true", ""); code != http.StatusOK || value(t, body) != fmt.Sprintf("v%d", writes-1) {
		t.Fatalf("stale get on the cut-off follower: %d %s, want its old value", code, body)
	}
	for range 3 {
		code, body := follower.do("GET", key, "")
		t.Logf("cut-off follower: %d %s", code, strings.TrimSpace(body))
		if code == http.StatusOK && value(t, body) != "after" {
			t.Fatalf("the cut-off follower answered a linearizable read with old data: %s", body)
		}
		if code != http.StatusOK && code != http.StatusServiceUnavailable {
			t.Fatalf("the cut-off follower answered %d %s, want 503 or the new value", code, body)
		}
	}

	// Healed, it catches up and serves the new value itself.
	c.Heal()
	waitServes(t, ctx, follower, key, "after")

	// A silent partition: the follower's connections stay open and carry
	// nothing, so it believes in its leader until its election timeout.
	// Its read index request is held; it never answers the old value.
	if err := c.Blackhole([]uint64{followerID}, c.Except(followerID)); err != nil {
		t.Fatal(err)
	}
	for {
		code, body := leader.do("PUT", key, "silent")
		if code == http.StatusOK {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("put during the silent partition: %d %s", code, body)
		}
		leaderID, _ = c.WaitLeader(ctx, c.Except(followerID)...)
		leader = pinned(t, c, leaderID)
	}
	code, body := follower.do("GET", key, "")
	t.Logf("silently cut-off follower: %d %s", code, strings.TrimSpace(body))
	if code == http.StatusOK && value(t, body) != "silent" {
		t.Fatalf("the silently cut-off follower answered a linearizable read with old data: %s", body)
	}
	c.Heal()
	waitServes(t, ctx, follower, key, "silent")
}

// waitServes waits until the node serves want for key in a linearizable
// read of its own (counted in its metrics as local), failing if it ever
// answers another value.
func waitServes(t *testing.T, ctx context.Context, n rawNode, key, want string) {
	t.Helper()
	for {
		before := n.localReads()
		code, body := n.do("GET", key, "")
		if code == http.StatusOK && value(t, body) != want {
			t.Fatalf("a linearizable read answered %s, want %s", body, want)
		}
		if code == http.StatusOK && n.localReads() > before {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never served %s itself: %d %s", n.base, want, code, body)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

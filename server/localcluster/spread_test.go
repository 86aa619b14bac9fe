package localcluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"coord/client"
)

// TestSpreadSkipsAPausedMember: with client.Config.Spread, a member whose
// process is stopped (SIGSTOP: its connections stay open and nothing
// answers, unlike a killed one, whose connections close) costs the client
// one attempt's timeout, not a write: every put succeeds, each at most
// once (the retry after the paused member's attempt keeps its session and
// sequence number), and the client goes on writing through the live
// members. Real processes on loopback.
func TestSpreadSkipsAPausedMember(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.ClientConfig()
	cfg.Spread = true
	cl, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "spread/warm", []byte("0")); err != nil {
		t.Fatal(err)
	}
	paused := c.Except(leader)[0]
	if err := c.Pause(paused); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Resume(paused) })
	const puts = 20
	var last uint64
	for i := range puts {
		rev, err := cl.Put(ctx, "spread/k", fmt.Appendf(nil, "%d", i))
		if err != nil {
			t.Fatalf("put %d with node %d paused: %v", i, paused, err)
		}
		if rev <= last {
			t.Fatalf("put %d at revision %d, after %d", i, rev, last)
		}
		last = rev
	}
	kv, err := cl.Get(ctx, "spread/k")
	if err != nil {
		t.Fatal(err)
	}
	if string(kv.Value) != fmt.Sprint(puts-1) {
		t.Fatalf("spread/k = %q, want the last put's %d", kv.Value, puts-1)
	}
	// Each put applied once: the key's version counts its puts.
	if kv.Version != puts {
		t.Fatalf("spread/k has version %d after %d puts: a put applied twice or not at all", kv.Version, puts)
	}
}

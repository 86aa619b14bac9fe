package localcluster

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// With election timeouts of 10 to 20 s, a cluster of real processes
// writes again within 5 s after its leader is killed (the followers take
// the closed connections as the hint that its process died) and after it
// is stopped (it hands leadership over first). Without the hint and the
// hand-over, each would wait out an election timeout, twice the bound.
func TestLeaderDeathAndStopFailOverBeforeAnyTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := FailoverBenchConfig{Nodes: 3, Dir: t.TempDir(), Binary: os.Args[0], SelfServe: true, Insecure: true,
		Tick: 20 * time.Millisecond}
	c, err := startFor(ctx, cfg, "slow-elections", false, []string{"--election-ticks", "500"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	rng := rand.New(rand.NewPCG(1, 2))
	const bound = 5 * time.Second // the election timeout is at least 10 s
	for _, e := range []struct {
		name string
		act  func(*Cluster, uint64) error
	}{
		{"SIGKILL", func(c *Cluster, id uint64) error { return c.Kill(id) }},
		{"SIGTERM", func(c *Cluster, id uint64) error { return c.Stop(id) }},
	} {
		ev, terms, err := c.outage(ctx, rng, e.act, bound)
		if err != nil {
			t.Fatalf("leader %s: no write within %v of it, with election timeouts of 10 s or more: %v", e.name, bound, err)
		}
		gap := time.Duration(ev.GapEnd - ev.GapStart)
		t.Logf("leader %s: writes stopped for %v; the election took %d term(s)", e.name, gap, terms)
		// The outage may end before the process exits (a hand-over's new
		// leader serves while the old one shuts down), never before the
		// signal.
		if ev.Leader == 0 || ev.GapStart > ev.GapEnd || ev.Exited < ev.Signalled || ev.GapEnd < ev.Signalled {
			t.Errorf("leader %s: event %+v: want the signalled leader, an exit after the signal and a gap that ends after it", e.name, ev)
		}
		if terms == 0 {
			t.Errorf("leader %s: the term did not rise", e.name)
		}
	}
}

package machines

import (
	"context"
	"os"
	"testing"

	"coord/lab"
	"coord/server/localcluster"
)

func TestMain(m *testing.M) {
	lab.ServeChild()
	localcluster.ServeIfChild()
	selfServe = true
	os.Exit(m.Run())
}

// runSmall runs an experiment at a small size, as `coord lab` would, with
// this test binary serving the lab children and the cluster's servers.
func runSmall(t *testing.T, name string, trials int) *lab.Result {
	t.Helper()
	e, err := lab.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	r := lab.Run(context.Background(), e, lab.Config{Quick: true, Trials: trials, Seed: 1})
	t.Logf("%s: original %q; coord %q; %s: %s", name, r.Original, r.Coord, r.Verdict.Outcome, r.Verdict.Reason)
	for _, d := range r.Details {
		t.Logf("  %s: %s", d.Label, d.Value)
	}
	if r.Verdict.Outcome.Bad() {
		t.Fatalf("%s: %s: %s", name, r.Verdict.Outcome, r.Verdict.Reason)
	}
	if r.Original == "" || r.Coord == "" || r.Verdict.Reason == "" {
		t.Fatalf("%s: incomplete summary row %+v", name, r)
	}
	if err := r.Row.Validate(); err != nil {
		t.Errorf("%s: %v", name, err)
	}
	return r
}

func TestBlockingSend(t *testing.T) {
	r := runSmall(t, "blocking-send", 1)
	if r.Verdict.Outcome != lab.Reproduced {
		t.Errorf("outcome %s, want reproduced: %s", r.Verdict.Outcome, r.Verdict.Reason)
	}
}

func TestRaftFailover(t *testing.T) {
	r := runSmall(t, "raft-failover", 8)
	if len(r.Charts) != 3 {
		t.Errorf("%d charts, want 3", len(r.Charts))
	}
}

func TestPartition(t *testing.T) { runSmall(t, "partition", 1) }

func TestQuorumSize(t *testing.T) {
	r := runSmall(t, "quorum-size", 1)
	if r.Verdict.Outcome != lab.Reproduced {
		t.Errorf("outcome %s: %s", r.Verdict.Outcome, r.Verdict.Reason)
	}
}

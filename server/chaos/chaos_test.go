package chaos

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"coord/server/localcluster"

	"github.com/anishathalye/porcupine"
)

var (
	duration = flag.Duration("chaos.duration", 6*time.Second, "how long each chaos run lasts (CI keeps it short; try 2m)")
	seed     = flag.Uint64("chaos.seed", 0, "seed of the nemesis and clients (0: from the clock, logged)")
)

func TestMain(m *testing.M) {
	localcluster.ServeIfChild()
	os.Exit(m.Run())
}

func runChaos(t *testing.T, nodes int) {
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay the choices with -chaos.seed %d; the OS scheduler is not replayed)", s, s)
	ctx, cancel := context.WithTimeout(context.Background(), *duration+4*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{
		Nodes: nodes, Duration: *duration, Clients: 4, Keys: 3, Seed: s,
		Dir: t.TempDir(), Binary: os.Args[0], SelfServe: true,
		ServerArgs: []string{"--tick", "20ms", "--snapshot-entries", "200"},
		Logf:       t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes: %d operations (%d acknowledged writes, %d unknown outcomes, %d reads unanswered or writes not applied), %d faults",
		nodes, rep.Ops, rep.Acked, rep.Unknown, rep.Failed, len(rep.Faults))
	if !rep.Linearizable {
		t.Errorf("history is not linearizable (%v); see %s", rep.Result, rep.Visualization)
	}
	for _, d := range rep.Diverged {
		t.Errorf("diverged: %s", d)
	}
	if !rep.Secure {
		t.Error("the chaos run was not secure: it must run as coord cluster up does, with TLS and tokens")
	}
	if rep.Acked == 0 || len(rep.Faults) == 0 {
		t.Errorf("the run proved nothing: %d acknowledged writes, %d faults", rep.Acked, len(rep.Faults))
	}
}

func TestChaos3(t *testing.T) { runChaos(t, 3) }
func TestChaos5(t *testing.T) { runChaos(t, 5) }

// TestModelCatchesViolations feeds the model histories that no correct
// cluster produces: the checker must refuse each.
func TestModelCatchesViolations(t *testing.T) {
	op := func(call, ret int64, in Input, out Output) porcupine.Operation {
		return porcupine.Operation{Input: in, Call: call, Output: out, Return: ret}
	}
	put := func(v string) Input { return Input{Kind: Put, Key: "k", Value: v} }
	get := Input{Kind: Get, Key: "k"}
	model := Model.ToModel()
	for name, h := range map[string][]porcupine.Operation{
		"stale read": {
			op(0, 1, put("a"), Output{OK: true, Rev: 5}),
			op(2, 3, put("b"), Output{OK: true, Rev: 6}),
			op(4, 5, get, Output{OK: true, Exists: true, Value: "a", Rev: 5}),
		},
		"lost acknowledged write": {
			op(0, 1, put("a"), Output{OK: true, Rev: 5}),
			op(2, 3, get, Output{OK: true}),
		},
		"revision goes backwards": {
			op(0, 1, put("a"), Output{OK: true, Rev: 5}),
			op(2, 3, put("b"), Output{OK: true, Rev: 4}),
		},
		"cas against the wrong revision": {
			op(0, 1, put("a"), Output{OK: true, Rev: 5}),
			op(2, 3, Input{Kind: CAS, Key: "k", Value: "b", Prev: 4}, Output{OK: true, Rev: 6}),
		},
		"value nobody wrote": {
			op(0, 1, get, Output{OK: true, Exists: true, Value: "zzz", Rev: 9}),
		},
	} {
		if porcupine.CheckOperations(model, h) {
			t.Errorf("%s: accepted as linearizable", name)
		}
	}
	ok := []porcupine.Operation{
		op(0, 10, put("a"), Output{OK: true, Rev: 5}),
		op(1, 2, get, Output{OK: true}), // concurrent with the put: before it
		op(3, 1<<40, put("lost?"), Output{Unknown: true}),
		op(11, 12, get, Output{OK: true, Exists: true, Value: "a", Rev: 5}),
		op(13, 14, Input{Kind: CAS, Key: "k", Value: "c", Prev: 5}, Output{OK: true, Rev: 8}),
		op(15, 16, Input{Kind: CAS, Key: "k", Value: "d", Prev: 5}, Output{Rev: 8}),
	}
	if !porcupine.CheckOperations(model, ok) {
		t.Error("a linearizable history was refused")
	}
}

// TestLeaseHoldersNeverOverlap runs lease holders on a 3-node cluster
// under the nemesis, leader kills, pauses and isolations included, and
// checks that no two holders ever believed they held one lease at once:
// renewals answered by the leader without a Raft write, expiries decided
// by the leader's clock, and the full TTL a new leader grants keep the
// promise across leader changes.
func TestLeaseHoldersNeverOverlap(t *testing.T) {
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay the choices with -chaos.seed %d; the OS scheduler is not replayed)", s, s)
	ctx, cancel := context.WithTimeout(context.Background(), *duration+4*time.Minute)
	defer cancel()
	rep, err := RunLeases(ctx, LeaseConfig{Config: Config{
		Nodes: 3, Duration: *duration, Clients: 4, Keys: 2, Seed: s,
		Dir: t.TempDir(), Binary: os.Args[0], SelfServe: true,
		ServerArgs: []string{"--tick", "20ms", "--snapshot-entries", "200"},
		Logf:       t.Logf,
	}, TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d tenures, %d renewals answered, %d faults", len(rep.Tenures), rep.Renewals, len(rep.Faults))
	for _, o := range rep.Overlaps {
		t.Errorf("two holders at once: %s", o)
	}
	if len(rep.Tenures) < 2 || rep.Renewals == 0 || len(rep.Faults) == 0 {
		t.Errorf("the run proved nothing: %d tenures, %d renewals, %d faults", len(rep.Tenures), rep.Renewals, len(rep.Faults))
	}
}

func TestOverlapsFindsTwoHoldersAtOnce(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ok := []Tenure{
		{Name: "L", Holder: "a", Token: 1, From: at(0), Until: at(100)},
		{Name: "L", Holder: "b", Token: 5, From: at(100), Until: at(200)},
		{Name: "M", Holder: "c", Token: 2, From: at(50), Until: at(150)},
		{Name: "L", Holder: "b", Token: 5, From: at(150), Until: at(160)}, // the same tenure, seen twice
	}
	if o := Overlaps(ok); len(o) != 0 {
		t.Fatalf("overlaps in a clean history: %v", o)
	}
	bad := append(ok, Tenure{Name: "L", Holder: "d", Token: 9, From: at(190), Until: at(300)})
	if o := Overlaps(bad); len(o) != 1 {
		t.Fatalf("overlaps %v, want the one of b and d", o)
	}
}

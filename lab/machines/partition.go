package machines

import (
	"context"
	"fmt"
	"slices"
	"time"

	"coord/client"
	"coord/lab"
	"coord/server/localcluster"
)

// fastArgs give experiment clusters 20 ms ticks (elections after 200-400
// ms), so that the lab stays short; the timings are not what they measure.
var fastArgs = []string{"--tick", "20ms"}

var partitionExperiment = lab.Experiment{
	Name:     "partition",
	Rung:     lab.Machines,
	Short:    "a partition: the minority refuses writes, the majority goes on",
	Shows:    "minority partition",
	Articles: "the minority side stops; consistent and unavailable (CAP section)",
	Figure:   "minority stops",
	Help: `Five coord server processes, with a fault proxy between every pair of peers.
The lab cuts the network between two nodes (the leader among them) and the
other three, for two seconds, while clients write through each side:

  - writes sent to the minority side must never be acknowledged (they time
    out: no majority can commit them);
  - the majority side elects a leader and keeps acknowledging writes;
  - the old leader, cut off from its majority, steps down (check-quorum);
  - stale reads on the minority side still answer, with old data: the
    choice the articles call available but divergent, here only on request;
  - once healed, the minority catches up with every write it missed.

The articles argue this (Part 3, "Which brings us to CAP") without running
it: their simulation has no partitions and no writes. Clusters here tick every
20 ms, to keep the lab short.

Predict before running: how long after the cut does the majority take writes
again? Does the old leader know it was deposed?`,
	Quick: lab.Params{Trials: 1},
	Full:  lab.Params{Trials: 3},
	Run:   runPartition,
}

// partitionTrial is what one partition showed.
type partitionTrial struct {
	Minority          []uint64 `json:"minority"`
	Majority          []uint64 `json:"majority"`
	MinorityAcked     int      `json:"minority_acked"`
	MinorityTried     int      `json:"minority_tried"`
	MajorityAcked     int      `json:"majority_acked"`
	NewLeaderSeconds  float64  `json:"new_leader_s"`
	OldLeaderStepped  bool     `json:"old_leader_stepped_down"`
	StaleReadServed   bool     `json:"stale_read_served"`
	StaleReadOld      bool     `json:"stale_read_was_old"`
	CatchUpSeconds    float64  `json:"catch_up_s"`
	MinorityConverged bool     `json:"minority_converged"`
}

func endpointsOf(c *localcluster.Cluster, ids []uint64) []string {
	var eps []string
	for _, n := range c.Nodes() {
		if slices.Contains(ids, n.ID) {
			eps = append(eps, n.HTTP)
		}
	}
	return eps
}

func newClient(eps []string, attempt time.Duration) *client.Client {
	cfg := client.DefaultConfig(eps...)
	cfg.AttemptTimeout = attempt
	cl, err := client.New(cfg)
	if err != nil {
		panic(err) // the endpoints come from a running cluster
	}
	return cl
}

func partitionTrialRun(ctx context.Context, env *lab.Env) (partitionTrial, error) {
	var t partitionTrial
	c, err := startCluster(ctx, env, 5, true, "partition", fastArgs...)
	if err != nil {
		return t, err
	}
	defer c.Close()
	all := newClient(c.Endpoints(), time.Second)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := all.Put(wctx, "x", []byte("before")); err != nil {
		return t, err
	}
	leader, err := c.WaitLeader(wctx)
	if err != nil {
		return t, err
	}
	others := c.Except(leader)
	t.Minority = []uint64{leader, others[env.Rand.IntN(len(others))]}
	slices.Sort(t.Minority)
	t.Majority = c.Except(t.Minority...)
	minority := newClient(endpointsOf(c, t.Minority), 300*time.Millisecond)
	majority := newClient(endpointsOf(c, t.Majority), 2*time.Second)

	cut := time.Now()
	if err := c.Partition(t.Minority, t.Majority); err != nil {
		return t, err
	}
	// The majority elects a leader among itself.
	if _, err := c.WaitLeader(wctx, t.Majority...); err != nil {
		return t, err
	}
	t.NewLeaderSeconds = time.Since(cut).Seconds()
	// Two seconds of writes on both sides, at the same time.
	end := time.Now().Add(2 * time.Second)
	var last uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; time.Now().Before(end); i++ {
			octx, ocancel := context.WithTimeout(ctx, 300*time.Millisecond)
			if _, err := minority.Put(octx, "x", []byte(fmt.Sprint("minority-", i))); err == nil {
				t.MinorityAcked++
			}
			ocancel()
			t.MinorityTried++
		}
	}()
	// The majority writes for the same two seconds, and on until one write
	// is acknowledged (up to 20 s): the claim is that it makes progress,
	// and a loaded machine (CI at load 20) may take longer than two
	// seconds to commit the first one.
	patience := time.Now().Add(20 * time.Second)
	for i := 0; time.Now().Before(end) || (t.MajorityAcked == 0 && time.Now().Before(patience)); i++ {
		octx, ocancel := context.WithTimeout(ctx, 3*time.Second)
		if rev, err := majority.Put(octx, "x", []byte(fmt.Sprint("majority-", i))); err == nil {
			t.MajorityAcked++
			last = rev
		}
		ocancel()
	}
	<-done
	for _, id := range t.Minority {
		if st, err := c.Status(wctx, id); err == nil && id == leader {
			t.OldLeaderStepped = st.Role != "leader"
		}
	}
	kv, err := minority.Get(wctx, "x", client.Stale())
	t.StaleReadServed = err == nil
	t.StaleReadOld = err == nil && string(kv.Value) == "before"

	healed := time.Now()
	c.Heal()
	for _, id := range t.Minority {
		for {
			st, err := c.Status(wctx, id)
			if err == nil && st.Applied >= last {
				break
			}
			select {
			case <-wctx.Done():
				return t, fmt.Errorf("partition: node %d never caught up to %d", id, last)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	t.CatchUpSeconds = time.Since(healed).Seconds()
	t.MinorityConverged = minorityConverges(wctx, c, majority, t.Minority)
	return t, nil
}

// minorityConverges reports whether every minority node comes to serve, from
// its own state machine, the value and revision the majority holds. The
// majority's value is read linearizably rather than taken from the last
// acknowledged write: a write whose client gave up may still commit after it,
// and the minority must converge to that one too. Convergence is a liveness
// property, so it is waited for, up to ctx's deadline.
func minorityConverges(ctx context.Context, c *localcluster.Cluster, majority *client.Client, minority []uint64) bool {
	for {
		final, err := majority.Get(ctx, "x")
		if err == nil && minorityServes(ctx, c, minority, final) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// minorityServes reports whether each minority node serves want as a stale read.
func minorityServes(ctx context.Context, c *localcluster.Cluster, minority []uint64, want client.KeyValue) bool {
	for _, ep := range endpointsOf(c, minority) {
		kv, err := newClient([]string{ep}, time.Second).Get(ctx, "x", client.Stale())
		if err != nil || kv.Revision != want.Revision || string(kv.Value) != string(want.Value) {
			return false
		}
	}
	return true
}

func runPartition(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	env.Progress.Start("partition", env.Trials)
	defer env.Progress.Finish()
	var trials []partitionTrial
	for range env.Trials {
		t, err := partitionTrialRun(ctx, env)
		if err != nil {
			return nil, err
		}
		trials = append(trials, t)
		env.Progress.Step()
	}
	minAcked, minTried, majAcked, stepped, stale, converged := 0, 0, 0, 0, 0, 0
	var newLeader, catchUp []float64
	for _, t := range trials {
		minAcked += t.MinorityAcked
		minTried += t.MinorityTried
		majAcked += t.MajorityAcked
		newLeader = append(newLeader, t.NewLeaderSeconds)
		catchUp = append(catchUp, t.CatchUpSeconds)
		if t.OldLeaderStepped {
			stepped++
		}
		if t.StaleReadServed && t.StaleReadOld {
			stale++
		}
		if t.MinorityConverged {
			converged++
		}
	}
	n := len(trials)
	res := &lab.Result{
		Original: "not run: the articles' simulation has no partitions and no writes",
		Coord: fmt.Sprintf("minority acked %d of %d writes; majority acked %d; minority caught up in %s s after the heal",
			minAcked, minTried, majAcked, fmtSeconds(lab.Summarize(catchUp).Median)),
		Row:  lab.Row{Original: "not run", Coord: fmt.Sprintf("minority %d acks", minAcked)},
		Data: trials,
	}
	res.AddDetail("minority (old leader + 1)", "%d of %d writes acknowledged; old leader stepped down in %d of %d; stale reads served old data in %d of %d",
		minAcked, minTried, stepped, n, stale, n)
	res.AddDetail("majority (3 of 5)", "new leader %v s after the cut; %d writes acknowledged in 2 s (or until the first, on a slow machine)", newLeader, majAcked)
	res.AddDetail("after the heal", "minority caught up in %v s; converged in %d of %d", catchUp, converged, n)
	res.Charts = []lab.Chart{{Name: "writes", Title: "Writes acknowledged during a 2 s partition", XLabel: "side", YLabel: "writes",
		Kind: lab.Bars, Categories: []string{"minority (2 nodes)", "majority (3 nodes)"},
		Series: []lab.Series{{Label: "acknowledged", Values: []float64{float64(minAcked), float64(majAcked)}}}}}
	ok := minAcked == 0 && majAcked > 0 && converged == n && stepped == n
	res.Verdict = lab.Judge(true, ok, fmt.Sprintf("minority acknowledged %d writes (want 0), majority %d (want > 0); old leader stepped down %d/%d; converged %d/%d",
		minAcked, majAcked, stepped, n, converged, n))
	return res, nil
}

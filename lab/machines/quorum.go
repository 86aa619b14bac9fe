package machines

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"coord/lab"
)

var quorumExperiment = lab.Experiment{
	Name:     "quorum-size",
	Rung:     lab.Machines,
	Short:    "how many failures 3, 4 and 5 nodes survive",
	Shows:    "3,4,5 nodes survive",
	Articles: "3 and 4 nodes tolerate 1 failure; 5 tolerate 2",
	Figure:   "1, 1, 2 deaths",
	Help: `A majority of n is floor(n/2) + 1, so a cluster of n tolerates n - that many
failures: 3 nodes survive one, 4 nodes still only one, 5 nodes two. The lab
starts clusters of 3, 4 and 5 coord server processes and kills them one node
at a time (SIGKILL, followers first, so that the measure is about the
majority and not about who leads); after each kill it tries a write for 4 s
(twenty election timeouts). A cluster tolerates f failures if writes still commit
with f nodes dead.

The articles derive this from quorum intersection (Part 3) without running
it. Clusters here tick every 20 ms, to keep the lab short.

Predict before running: what does the fourth node buy?`,
	Quick: lab.Params{Trials: 1},
	Full:  lab.Params{Trials: 3},
	Run:   runQuorum,
}

// quorumWait is how long a write may take before the cluster counts as
// unable to commit: twenty election timeouts at 20 ms ticks, generous on a
// loaded machine.
const quorumWait = 4 * time.Second

// quorumTrial is one cluster size's result.
type quorumTrial struct {
	Nodes int `json:"nodes"`
	// Commits[f] says whether a write committed with f nodes dead.
	Commits   []bool `json:"commits"`
	Tolerated int    `json:"tolerated"`
}

func quorumRun(ctx context.Context, env *lab.Env, n int) (quorumTrial, error) {
	t := quorumTrial{Nodes: n}
	c, err := startCluster(ctx, env, n, false, fmt.Sprintf("quorum-%d", n), fastArgs...)
	if err != nil {
		return t, err
	}
	defer c.Close()
	cl := newClient(c.Endpoints(), 300*time.Millisecond)
	for f := 0; f <= n/2+1 && f < n; f++ {
		if f > 0 {
			// Kill a follower (the leader only when nothing else is left).
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			leader, _ := c.WaitLeader(wctx)
			cancel()
			victim := uint64(0)
			for _, id := range c.IDs() {
				if c.Running(id) && id != leader {
					victim = id
					break
				}
			}
			if victim == 0 {
				victim = leader
			}
			if err := c.Kill(victim); err != nil {
				return t, err
			}
		}
		wctx, cancel := context.WithTimeout(ctx, quorumWait)
		_, err := cl.Put(wctx, "x", []byte(fmt.Sprint(f)))
		cancel()
		t.Commits = append(t.Commits, err == nil)
		if err != nil {
			break
		}
		t.Tolerated = f
	}
	return t, nil
}

func runQuorum(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	sizes := []int{3, 4, 5}
	env.Progress.Start("quorum-size", env.Trials*len(sizes))
	defer env.Progress.Finish()
	var trials []quorumTrial
	tolerated := map[int][]int{}
	for range env.Trials {
		for _, n := range sizes {
			t, err := quorumRun(ctx, env, n)
			if err != nil {
				return nil, err
			}
			trials = append(trials, t)
			tolerated[n] = append(tolerated[n], t.Tolerated)
			env.Progress.Step()
		}
	}
	want := map[int]int{3: 1, 4: 1, 5: 2}
	ok := true
	var summary string
	var values []float64
	var cats, cells []string
	for _, n := range sizes {
		for _, f := range tolerated[n] {
			ok = ok && f == want[n]
		}
		summary += fmt.Sprintf("%d nodes: %v; ", n, tolerated[n])
		cats = append(cats, fmt.Sprintf("%d nodes", n))
		cells = append(cells, strconv.Itoa(tolerated[n][0]))
		values = append(values, float64(tolerated[n][0]))
	}
	summary = summary[:len(summary)-2]
	res := &lab.Result{
		Original: "not run: the articles derive it from quorum intersection",
		Coord:    "failures tolerated: " + summary,
		Row:      lab.Row{Original: "not run", Coord: strings.Join(cells, ", ") + " deaths"},
		Data:     trials,
	}
	for _, t := range trials {
		res.AddDetail(fmt.Sprintf("%d nodes", t.Nodes), "write committed with 0..%d dead: %v", len(t.Commits)-1, t.Commits)
	}
	res.Charts = []lab.Chart{{Name: "tolerated", Title: "Failures a cluster survives", XLabel: "cluster size", YLabel: "nodes that may die",
		Kind: lab.Bars, Categories: cats, Series: []lab.Series{{Label: "measured", Values: values}}}}
	res.Verdict = lab.Judge(true, ok, "tolerated "+summary+" (want 1, 1, 2)")
	return res, nil
}

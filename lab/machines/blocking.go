package machines

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"coord/client"
	"coord/lab"
)

const childArticlesRaft = "articles-raft"

var blockingExperiment = lab.Experiment{
	Name:     "blocking-send",
	Rung:     lab.Machines,
	Short:    "a crashed node wedges the articles' blocking channel network",
	Shows:    "crash, blocked send",
	Articles: "blocking send: deadlock ~12 s after the crash; non-blocking: new leader",
	Figure:   "deadlock ~12 s",
	Help: `The articles' Raft simulation sends messages on buffered channels, ten slots
per node. With a plain (blocking) send, a crashed node's inbox fills with the
leader's heartbeats, the eleventh send blocks the leader, the followers time
out and block sending vote requests to the dead node, and the Go runtime
reports "all goroutines are asleep - deadlock!". The fix, a select with a
default, drops the message as a network drops a packet to a dead machine.

  articles  the articles' program, re-implemented faithfully (lab/machines,
            articles.go): 3 nodes, timeouts of 3 + rand.Intn(3) s, heartbeats
            every second, node 0 crashed at 10 s. One of the articles' seconds
            is 25 ms here. Each variant runs in a child process (coord
            lab-child articles-raft) for 60 of the articles' seconds. A run is
            wedged if nothing happens in its last 20 s; the Go runtime's
            "all goroutines are asleep" report, which ended the articles' run,
            is counted when it fires, but it does not in a binary that imports
            package net (as coord does) under Go 1.26, so silence decides.
  coord     a 3-node coord cluster (real coord server processes): a follower
            is killed with SIGKILL, then the leader, while a client keeps
            writing. coord's TCP transport queues per peer and drops when a
            peer is gone or slow; a send never blocks.

Predict before running: how long after the crash does the blocking network
wedge, in the articles' seconds? Does it matter whether the crashed node was
the leader?`,
	Quick: lab.Params{Trials: 2},
	Full:  lab.Params{Trials: 10},
	Run:   runBlocking,
}

// articlesChild runs the articles' program in this process and prints its
// events as JSON lines. Flags: -blocking, -unit, -crash-at, -crash-leader,
// -seed, -for (articles' seconds before exiting normally).
func articlesChild(args []string) int {
	fs := flag.NewFlagSet(childArticlesRaft, flag.ContinueOnError)
	var cfg ArticlesConfig
	var runFor float64
	fs.BoolVar(&cfg.Blocking, "blocking", false, "blocking channel sends (the articles' first version)")
	fs.DurationVar(&cfg.Unit, "unit", 25*time.Millisecond, "length of one of the articles' seconds")
	fs.Float64Var(&cfg.CrashAt, "crash-at", 10, "crash a node after this many of the articles' seconds")
	fs.BoolVar(&cfg.CrashLeader, "crash-leader", false, "crash the leader instead of node 0")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the election timeouts")
	fs.Float64Var(&runFor, "for", 0, "exit after this many of the articles' seconds (0: never, as the articles' main)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg.Nodes = 3
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	emit := func(e ArticlesEvent) {
		mu.Lock()
		defer mu.Unlock()
		b, _ := json.Marshal(e)
		out.Write(append(b, '\n'))
		out.Flush()
	}
	ctx := context.Background()
	if runFor > 0 {
		// A bounded run needs a timer, which keeps the runtime's deadlock
		// detector quiet: only the unbounded run can report the deadlock.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(runFor*float64(cfg.Unit)))
		defer cancel()
	}
	RunArticles(ctx, cfg, emit)
	return 0
}

// articlesRun is one child run's outcome.
type articlesRun struct {
	Blocking bool            `json:"blocking"`
	Events   []ArticlesEvent `json:"-"`
	// Deadlock: the Go runtime reported "all goroutines are asleep".
	Deadlock bool `json:"deadlock"`
	// Wedged: no election and no heartbeat during the last 20 of the
	// articles' seconds (by the runtime's report or by silence).
	Wedged bool `json:"wedged"`
	// WedgedAfter is the time from the crash to the last event, in the
	// articles' seconds.
	WedgedAfter float64 `json:"wedged_after_s"`
	// Recovered: a leader was elected, or heartbeats went on, after the
	// crash.
	Recovered   bool `json:"recovered"`
	CrashedNode int  `json:"crashed_node"`
}

const articlesUnit = 25 * time.Millisecond

func runArticlesChild(ctx context.Context, env *lab.Env, blocking bool, seed uint64) (articlesRun, error) {
	const horizon = 60.0 // articles' seconds
	ctx, cancel := context.WithTimeout(ctx, time.Duration(horizon*float64(articlesUnit))+10*time.Second)
	defer cancel()
	args := []string{"-unit", articlesUnit.String(), "-seed", fmt.Sprint(seed)}
	if blocking {
		args = append(args, "-blocking")
	}
	cmd := env.ChildCommand(ctx, childArticlesRaft, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = nil, &stderr // Command discards both by default
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return articlesRun{}, err
	}
	if err := cmd.Start(); err != nil {
		return articlesRun{}, err
	}
	// The child's output is read as it comes: its first event starts the
	// horizon's clock, because the child's own clock starts when it does,
	// and a loaded machine may take longer than the whole horizon to start
	// a process (CI once killed a child before its crash at 10 s).
	var stdout bytes.Buffer
	first := make(chan float64, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			var e ArticlesEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				select {
				case first <- e.At:
				default:
				}
			}
			stdout.Write(sc.Bytes())
			stdout.WriteByte('\n')
		}
	}()
	// The child runs until the runtime kills it (deadlock) or the horizon
	// passes; either way its story is in its output.
	done := make(chan error, 1)
	go func() {
		<-read // Wait must not close the pipe before everything is read
		done <- cmd.Wait()
	}()
	var horizonEnd <-chan time.Time
	for horizonEnd == nil {
		select {
		case err = <-done:
		case at := <-first:
			horizonEnd = time.After(time.Duration((horizon - at) * float64(articlesUnit)))
			continue
		}
		break
	}
	if horizonEnd != nil {
		select {
		case err = <-done:
		case <-horizonEnd:
			_ = cmd.Process.Kill()
			err = <-done
		}
	}
	run := articlesRun{Blocking: blocking, CrashedNode: -1}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return run, err
	}
	run.Deadlock = strings.Contains(stderr.String(), "all goroutines are asleep")
	crashAt := -1.0
	for _, line := range strings.Split(stdout.String(), "\n") {
		var e ArticlesEvent
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		run.Events = append(run.Events, e)
		if e.What == "crash" {
			crashAt, run.CrashedNode = e.At, e.Node
		}
	}
	if crashAt < 0 {
		return run, fmt.Errorf("articles' program never crashed a node (stderr: %s)", stderr.String())
	}
	last := crashAt
	for _, e := range run.Events {
		if e.At > crashAt && e.What != "crash" {
			last = e.At
			if e.What == "leader" || e.What == "heartbeat" {
				run.Recovered = true
			}
		}
	}
	run.WedgedAfter = last - crashAt
	run.Wedged = run.Deadlock || last < horizon-20
	return run, nil
}

// coordKeepsGoing kills a follower, then the leader, of a 3-node cluster
// while a client writes, and returns the writes acknowledged after each.
func coordKeepsGoing(ctx context.Context, env *lab.Env) (afterFollower, afterLeader int, err error) {
	c, err := startCluster(ctx, env, 3, false, "blocking")
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	cl, err := client.New(client.DefaultConfig(c.Endpoints()...))
	if err != nil {
		return 0, 0, err
	}
	writes := func(d time.Duration) int {
		n := 0
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if _, err := cl.Put(wctx, "k", []byte(fmt.Sprint(n))); err == nil {
				n++
			}
			cancel()
		}
		return n
	}
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, id := range c.IDs() {
		if id != leader {
			_ = c.Kill(id)
			break
		}
	}
	// Twelve heartbeat intervals and more: what wedged the articles' leader.
	afterFollower = writes(1500 * time.Millisecond)
	_ = c.Kill(leader)
	// With one node of three left, no majority: restart the follower so
	// that the cluster can elect a leader again.
	for _, id := range c.IDs() {
		if id != leader && !c.Running(id) {
			if err := c.Restart(ctx, id); err != nil {
				return afterFollower, 0, err
			}
		}
	}
	afterLeader = writes(3 * time.Second)
	return afterFollower, afterLeader, nil
}

func runBlocking(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	env.Progress.Start("blocking-send", 2*env.Trials+1)
	defer env.Progress.Finish()
	var blocking, nonblocking []articlesRun
	for i := range env.Trials {
		seed := env.Rand.Uint64()
		b, err := runArticlesChild(ctx, env, true, seed)
		if err != nil {
			return nil, err
		}
		env.Progress.Step()
		nb, err := runArticlesChild(ctx, env, false, seed)
		if err != nil {
			return nil, err
		}
		env.Progress.Step()
		blocking, nonblocking = append(blocking, b), append(nonblocking, nb)
		env.Logger.Debug("blocking-send trial", "trial", i, "blocking", b, "nonblocking", nb)
	}
	afterFollower, afterLeader, err := coordKeepsGoing(ctx, env)
	if err != nil {
		return nil, err
	}
	env.Progress.Step()

	wedged, deadlocks, recovered := 0, 0, 0
	var wedgeTimes []float64
	for _, r := range blocking {
		if r.Wedged {
			wedged++
			wedgeTimes = append(wedgeTimes, r.WedgedAfter)
		}
		if r.Deadlock {
			deadlocks++
		}
	}
	for _, r := range nonblocking {
		if r.Recovered && !r.Wedged {
			recovered++
		}
	}
	res := &lab.Result{
		Original: fmt.Sprintf("blocking: %d/%d wedged (%d reported by the runtime), median %.0f s after the crash; non-blocking: %d/%d recovered",
			wedged, len(blocking), deadlocks, lab.Summarize(wedgeTimes).Median, recovered, len(nonblocking)),
		Coord: fmt.Sprintf("%d writes acked after a follower was killed, %d after the leader was", afterFollower, afterLeader),
		Row:   lab.Row{Original: fmt.Sprintf("wedged %d/%d", wedged, len(blocking)), Coord: writesGoOn(afterFollower, afterLeader)},
		Data:  map[string]any{"blocking": blocking, "nonblocking": nonblocking, "coord_writes_after_follower_kill": afterFollower, "coord_writes_after_leader_kill": afterLeader},
	}
	res.AddDetail("articles, blocking send", "%d of %d runs wedged; %d ended by the Go runtime's deadlock report; wedged %v articles' seconds after the crash",
		wedged, len(blocking), deadlocks, wedgeTimes)
	res.AddDetail("articles, non-blocking send", "%d of %d runs kept electing or heartbeating after the crash", recovered, len(nonblocking))
	res.AddDetail("coord", "a killed follower: %d writes acknowledged in the next 1.5 s; a killed leader (follower restarted): %d in the next 3 s", afterFollower, afterLeader)
	res.Charts = []lab.Chart{{
		Name: "runs", Title: "The articles' network after a crash", XLabel: "outcome", YLabel: "runs",
		Kind: lab.Bars, Categories: []string{"wedged", "recovered"},
		Series: []lab.Series{
			{Label: "blocking send", Values: []float64{float64(wedged), float64(len(blocking) - wedged)}},
			{Label: "non-blocking send", Values: []float64{float64(len(nonblocking) - recovered), float64(recovered)}},
		},
	}}
	res.Verdict = lab.Judge(wedged == len(blocking) && recovered == len(nonblocking), afterFollower > 0 && afterLeader > 0,
		fmt.Sprintf("blocking wedged %d/%d, non-blocking recovered %d/%d; coord acknowledged %d and %d writes after the kills",
			wedged, len(blocking), recovered, len(nonblocking), afterFollower, afterLeader))
	return res, nil
}

// writesGoOn is coord's summary cell: whether the cluster acknowledged writes
// after both kills.
func writesGoOn(afterFollower, afterLeader int) string {
	if afterFollower > 0 && afterLeader > 0 {
		return "writes go on"
	}
	return fmt.Sprintf("acked %d, %d", afterFollower, afterLeader)
}

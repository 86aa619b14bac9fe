package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"text/tabwriter"
	"time"

	"coord/bench"
	"coord/lab"
	"coord/lab/report"
	"coord/sim"

	"github.com/spf13/cobra"
)

// simFlags configure coord sim.
type simFlags struct {
	seeds       int
	seed        uint64
	nodes       int
	faults      string
	chaos       time.Duration
	preVote     bool
	checkQuorum bool
	hints       bool
	trace       bool
	parallel    int
	disk        bool
	jsonOut     bool
}

func newSimCmd() *cobra.Command {
	var f simFlags
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the deterministic Raft cluster simulator over many seeds",
		Long: `Simulate a Raft cluster, one seed per run: the seed drives message loss,
delay, reordering and duplication, partitions (symmetric and one-way), crashes
and restarts, membership changes and a client workload, all in simulated time.
After every step the checkers verify one leader per term, one vote per node per
term, log matching, leader completeness, state machine safety, linearizable
reads (on leaders, and on followers, which ask the leader for a read index) and
that no acknowledged write is lost; once the faults stop, a leader
must commit a new write within a bound (liveness).

--disk keeps each node's log in the durable storage (write-ahead log and
snapshot files) on a crashable in-memory file system, where a crash keeps only
what was synced and can strike in the middle of a write. It adds the disk
faults: diskfull (a node's writes fail with ENOSPC for a while; it holds its
work, answers nothing, and resumes when space returns) and lostdir (a node's
log, snapshots and vote file are deleted; its restart must be refused, and it
is removed from the cluster).

kill kills a node's process on a host that lives: its peers see its
connections close and take that as a hint that it died (the leader is then
replaced at once, not after the election timeout); crash is a machine's crash,
which is silent. cut resets the connection between two live nodes: both ends
see it close, a false hint. --hints=false makes nodes ignore closed
connections, as coord server --peer-close-hint=false does. The run reports
leader changes, and those no fault explains; a run without faults fails on
the first of those. Each seed also chooses small flow-control and byte
limits (snapshots every few bytes, a bound on a candidate's held writes), and
in half the seeds a write that reaches a candidate is held until its election
ends (ProposeAtElection); one it refuses must never apply.

--seeds N runs seeds --seed .. --seed+N-1 (in parallel; each run is still
deterministic). A failure prints the seed and the command that replays it;
--trace with one seed prints what happened. With --json, one JSON object
with the configuration and the totals.`,
		Example: `  coord sim --seeds 1000
  coord sim --seeds 200 --disk
  coord sim --seed 42 --trace
  coord sim --seeds 100 --nodes 3 --faults partition,crash --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSim(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.seeds, "seeds", 1, "how many seeds to run")
	fl.Uint64Var(&f.seed, "seed", 1, "the first seed")
	fl.IntVar(&f.nodes, "nodes", 5, "voters the cluster starts with (1-9)")
	fl.StringVar(&f.faults, "faults", "all", "faults to inject: all, none, or a comma-separated list of "+sim.Faults(sim.AllFaults).Names())
	fl.DurationVar(&f.chaos, "chaos", sim.DefaultConfig().Chaos, "simulated time during which faults are injected")
	fl.BoolVar(&f.preVote, "pre-vote", true, "raft pre-vote")
	fl.BoolVar(&f.checkQuorum, "check-quorum", true, "raft check-quorum")
	fl.BoolVar(&f.hints, "hints", true, "nodes take a closed connection as a hint that the peer died")
	fl.BoolVar(&f.disk, "disk", false, "keep each node's log in the durable storage (write-ahead log, snapshot files) on a crashable in-memory file system")
	fl.BoolVar(&f.trace, "trace", false, "print the event trace of each run to stderr (use with one seed)")
	fl.IntVar(&f.parallel, "parallel", runtime.GOMAXPROCS(0), "seeds run at once")
	addJSONFlag(cmd, &f.jsonOut, "print one JSON object: the seeds run, the configuration and the totals")
	cmd.AddCommand(newSimElectionTimeCmd())
	return cmd
}

// config returns the run's configuration for the first seed; each run
// changes only Seed.
func (f simFlags) config() (sim.Config, error) {
	faults, err := sim.ParseFaults(f.faults)
	if err != nil {
		return sim.Config{}, &usageError{err: fmt.Errorf("--faults: %w", err)}
	}
	// The flags the user typed are checked here, in the user's words; the
	// rest of the configuration is the simulator's own.
	if f.nodes < 1 || f.nodes > 9 {
		return sim.Config{}, usagef("--nodes %d: want 1 to 9", f.nodes)
	}
	if err := nonNegative("--chaos", 24*time.Hour).check(f.chaos); err != nil {
		return sim.Config{}, err
	}
	cfg := sim.DefaultConfig()
	cfg.Seed = f.seed
	cfg.Nodes = f.nodes
	cfg.Faults = faults
	cfg.Chaos = f.chaos
	cfg.PreVote = f.preVote
	cfg.CheckQuorum = f.checkQuorum
	cfg.Hints = f.hints
	cfg.Disk = f.disk
	if err := cfg.Validate(); err != nil {
		return sim.Config{}, &usageError{err: err}
	}
	return cfg, nil
}

func runSim(ctx context.Context, stdout, stderr io.Writer, f simFlags) error {
	if f.seeds < 1 {
		return usagef("--seeds %d: want at least 1", f.seeds)
	}
	if f.parallel < 1 {
		return usagef("--parallel %d: want at least 1", f.parallel)
	}
	base, err := f.config()
	if err != nil {
		return err
	}
	bar := newProgress(stderr, f.seeds, "seeds")
	start := time.Now()
	results := make([]sim.Result, f.seeds)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(f.parallel, f.seeds) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				cfg := base
				cfg.Seed += uint64(i)
				s, err := sim.New(cfg)
				if err != nil {
					results[i] = sim.Result{Config: cfg, Err: err}
					continue
				}
				if f.trace {
					s.SetTrace(stderr)
				}
				results[i] = s.Run()
				bar.Step()
			}
		}()
	}
	sent := 0
feed:
	for ; sent < f.seeds; sent++ {
		select {
		case next <- sent:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	bar.Finish()
	elapsed := time.Since(start)

	var total sim.Stats
	for _, r := range results[:sent] {
		if r.Err != nil {
			fmt.Fprintln(stderr, r.Err)
			return &exitError{code: exitFailure}
		}
		total.Add(r.Stats)
	}
	storage := "raft.MemoryStorage"
	if base.Disk {
		storage = "WAL on a crashable file system"
	}
	if f.jsonOut {
		err := writeJSON(stdout, simReport{FirstSeed: f.seed, Seeds: sent, Nodes: base.Nodes, Faults: base.Faults.String(),
			ChaosMS: base.Chaos.Milliseconds(), Storage: storage, WallMS: elapsed.Milliseconds(),
			SimulatedMS: total.SimulatedTime.Milliseconds(), Stats: total})
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted after %d seeds: %w", sent, ctx.Err())
		}
		return nil
	}
	fmt.Fprintf(stdout, "%d seeds passed (%d..%d), %d nodes, faults %s, %v of chaos each, storage: %s\n",
		sent, f.seed, f.seed+uint64(sent)-1, base.Nodes, base.Faults, base.Chaos, storage)
	fmt.Fprintf(stdout, "%d steps, %v simulated in %v wall time: %.0f seeds/s, %.0f steps/s\n",
		total.Steps, total.SimulatedTime.Round(time.Second), elapsed.Round(time.Millisecond),
		float64(sent)/elapsed.Seconds(), float64(total.Steps)/elapsed.Seconds())
	fmt.Fprintf(stdout, "messages: %d delivered, %d dropped; leaders elected: %d; crashes: %d; partitions: %d\n",
		total.Delivered, total.Dropped, total.Leaders, total.Crashes, total.Partitions)
	fmt.Fprintf(stdout, "membership changes: %d (%d joint); leadership transfers: %d; snapshots: %d; writes: %d accepted, %d acknowledged; reads confirmed: %d (by followers: %d)\n",
		total.ConfChanges, total.JointChanges, total.Transfers, total.Snapshots, total.Writes, total.AckedWrites, total.Reads, total.FollowerReads)
	fmt.Fprintf(stdout, "writes forwarded by followers: %d accepted, %d acknowledged\n", total.ForwardedWrites, total.ForwardedAcked)
	fmt.Fprintf(stdout, "forwarded writes answered: %d refused, %d lost to another entry (both checked never to apply), %d unanswered; read index refusals: %d\n",
		total.ForwardedRefused, total.ForwardedLost, total.ForwardedUnanswered, total.ReadsRefused)
	fmt.Fprintf(stdout, "writes held by candidates: %d; refused at once: %d; not elected: %d (both checked never to apply)\n",
		total.ElectionWrites, total.ElectionWritesRefused, total.ElectionWritesNotElected)
	fmt.Fprintf(stdout, "process kills: %d; connections reset: %d; closes reported to nodes: %d; leader changes: %d (no fault explains: %d)\n",
		total.Kills, total.Cuts, total.Hints, total.LeaderChanges, total.UnprovokedLeaderChanges)
	if base.Disk {
		fmt.Fprintf(stdout, "disks filled: %d (Readies held until space returned: %d); data directories lost and restarts refused: %d\n",
			total.DiskFulls, total.StuckReadies, total.LostDirs)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted after %d seeds: %w", sent, ctx.Err())
	}
	return nil
}

// simReport is coord sim --json: one object for the whole run. A failing
// seed is reported on stderr with its replay command, as without --json.
type simReport struct {
	FirstSeed   uint64    `json:"first_seed"`
	Seeds       int       `json:"seeds"`
	Nodes       int       `json:"nodes"`
	Faults      string    `json:"faults"`
	ChaosMS     int64     `json:"chaos_ms"`
	Storage     string    `json:"storage"`
	WallMS      int64     `json:"wall_ms"`
	SimulatedMS int64     `json:"simulated_ms"`
	Stats       sim.Stats `json:"stats"`
}

// newProgress returns lab/report's progress bar on w when w is a terminal
// and there is more than one step to show; otherwise one that shows nothing,
// so that logs and CI output stay clean.
func newProgress(w io.Writer, total int, what string) lab.Progress {
	f, _ := w.(*os.File)
	bar := report.Progress(f)
	if bar == nil || total < 2 {
		return lab.NopProgress{}
	}
	p := bar(what)
	p.Start(what, total)
	return p
}

// electionFlags configure coord sim election-time.
type electionFlags struct {
	trials  int
	seed    uint64
	jsonOut bool
}

func newSimElectionTimeCmd() *cobra.Command {
	var f electionFlags
	cmd := &cobra.Command{
		Use:   "election-time",
		Short: "Election time after a leader crash, and the split-vote rate (the Raft paper's Figure 16)",
		Long: `Reproduce the setting of the Raft paper's Figure 16 in the simulator: 5
servers, election timeouts drawn from 150-300 ms, heartbeats every 75 ms (half
the minimum timeout), the leader crashed at a random moment within its
heartbeat interval; measure the time until a new leader is elected, and how
often more than one election was needed (a split vote). The tick is 5 ms;
messages take 1-5 ms. Rows: with and without pre-vote, coord's defaults (10 ms
ticks, 100-200 ms timeouts, heartbeat every tick), and the articles' teaching
simulation (3 nodes, timeouts of 3, 4 or 5 s, heartbeats every second).
With --json, one JSON object with a row per setting.`,
		Example: `  coord sim election-time
  coord sim election-time --trials 200 --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runElectionTime(cmd.OutOrStdout(), cmd.ErrOrStderr(), f)
		},
	}
	cmd.Flags().IntVar(&f.trials, "trials", 1000, "leader crashes per setting")
	cmd.Flags().Uint64Var(&f.seed, "seed", 1, "the first trial's seed")
	addJSONFlag(cmd, &f.jsonOut, "print one JSON object: the machine, the seed and a row per setting")
	return cmd
}

// electionReport is coord sim election-time --json: one object.
type electionReport struct {
	Machine  string        `json:"machine"`
	Seed     uint64        `json:"seed"`
	Settings []electionRow `json:"settings"`
}

// electionRow is one setting's figures.
type electionRow struct {
	Setting       string  `json:"setting"`
	Trials        int     `json:"trials"`
	TimeoutMinMs  float64 `json:"timeout_min_ms"`
	HeartbeatMs   float64 `json:"heartbeat_ms"`
	TickMs        float64 `json:"tick_ms"`
	MinMs         float64 `json:"min_ms"`
	P10Ms         float64 `json:"p10_ms"`
	P25Ms         float64 `json:"p25_ms"`
	P50Ms         float64 `json:"p50_ms"`
	P75Ms         float64 `json:"p75_ms"`
	P90Ms         float64 `json:"p90_ms"`
	P99Ms         float64 `json:"p99_ms"`
	MaxMs         float64 `json:"max_ms"`
	SplitVotes    int     `json:"split_votes"`
	SplitVoteRate float64 `json:"split_vote_rate"`
	Failed        int     `json:"failed"`
}

func runElectionTime(stdout, stderr io.Writer, f electionFlags) error {
	if f.trials < 1 {
		return usagef("--trials %d: want at least 1", f.trials)
	}
	paper := sim.PaperElectionConfig()
	paper.Trials, paper.Seed = f.trials, f.seed
	noPreVote := paper
	noPreVote.PreVote = false
	defaults := paper
	defaults.Tick, defaults.ElectionTicks, defaults.HeartbeatTicks = 10*time.Millisecond, 10, 1
	articles := sim.ArticlesElectionConfig()
	articles.Trials, articles.Seed = f.trials, f.seed
	settings := []struct {
		name string
		ec   sim.ElectionConfig
	}{
		{"paper 150-300 ms, pre-vote", paper},
		{"paper 150-300 ms, no pre-vote", noPreVote},
		{"coord defaults 100-200 ms, pre-vote", defaults},
		{"articles 3/4/5 s, 3 nodes, no pre-vote", articles},
	}
	bar := newProgress(stderr, f.trials*len(settings), "trials")
	var rows []electionRow
	for _, s := range settings {
		res, err := sim.MeasureElections(s.ec, bar.Step)
		if err != nil {
			return err
		}
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		rows = append(rows, electionRow{
			Setting: s.name, Trials: s.ec.Trials,
			TimeoutMinMs: ms(time.Duration(s.ec.ElectionTicks) * s.ec.Tick),
			HeartbeatMs:  ms(time.Duration(s.ec.HeartbeatTicks) * s.ec.Tick),
			TickMs:       ms(s.ec.Tick),
			MinMs:        ms(res.Quantile(0)), P10Ms: ms(res.Quantile(0.1)), P25Ms: ms(res.Quantile(0.25)),
			P50Ms: ms(res.Quantile(0.5)), P75Ms: ms(res.Quantile(0.75)),
			P90Ms: ms(res.Quantile(0.9)), P99Ms: ms(res.Quantile(0.99)),
			MaxMs:      ms(res.Quantile(1)),
			SplitVotes: res.SplitVotes, SplitVoteRate: res.SplitVoteRate(), Failed: res.Failed,
		})
	}
	bar.Finish()
	if f.jsonOut {
		return writeJSON(stdout, electionReport{Machine: bench.Machine(), Seed: f.seed, Settings: rows})
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "setting\ttrials\tmin\tp10\tp25\tp50\tp75\tp90\tp99\tmax (ms)\tsplit votes\tfailed\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%d (%.1f%%)\t%d\t\n",
			r.Setting, r.Trials, r.MinMs, r.P10Ms, r.P25Ms, r.P50Ms, r.P75Ms, r.P90Ms, r.P99Ms, r.MaxMs,
			r.SplitVotes, 100*r.SplitVoteRate, r.Failed)
	}
	return tw.Flush()
}

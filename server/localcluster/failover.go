package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"coord/bench"
	"coord/client"
)

// FailoverBenchConfig configures RunFailoverBench: two fresh clusters of
// Nodes real processes of Binary, side by side in Dir, one with coord's
// defaults (the leader-gone hint, the hand-over on SIGTERM) and one
// without them (--peer-close-hint=false --shutdown-handover=0), each with
// a Raft tick of Tick (coord's default timeouts: 10 to 20 ticks).
type FailoverBenchConfig struct {
	Nodes  int
	Dir    string
	Binary string
	Tick   time.Duration
	// Kills is how many times each cluster's leader is killed (SIGKILL);
	// Stops how many times it is stopped (SIGTERM).
	Kills, Stops int
	// Faults is how long the fault run lasts (0: none): both clusters,
	// their peers behind fault proxies, get the same random connection
	// cuts and silent partitions, and no process dies.
	Faults time.Duration
	// Seed drives the faults and the moments of the kills.
	Seed     uint64
	Insecure bool
	// SelfServe says Binary is a test binary that serves `server` itself
	// (Config.SelfServe).
	SelfServe bool
	// NodeLogLevel, if set, is every node's --log-level ("debug" logs
	// when a follower sees its leader's connection close).
	NodeLogLevel string
	// NodeLogFormat, if set, is every node's --log-format ("json" logs
	// carry nanosecond times, for the election trace at debug level).
	NodeLogFormat string
}

// Validate names the first field out of range.
func (c FailoverBenchConfig) Validate() error {
	switch {
	case c.Nodes < 3 || c.Nodes > 9:
		return fmt.Errorf("%w: nodes %d: want 3 to 9", ErrInvalid, c.Nodes)
	case c.Dir == "" || c.Binary == "":
		return fmt.Errorf("%w: Dir and Binary are required", ErrInvalid)
	case c.Tick <= 0:
		return fmt.Errorf("%w: tick %v must be positive", ErrInvalid, c.Tick)
	case c.Kills < 0 || c.Stops < 0 || c.Faults < 0:
		return fmt.Errorf("%w: kills %d, stops %d and faults %v must not be negative", ErrInvalid, c.Kills, c.Stops, c.Faults)
	case c.Kills > 1000 || c.Stops > 1000 || c.Faults > time.Hour:
		return fmt.Errorf("%w: at most 1000 kills, 1000 stops and an hour of faults", ErrInvalid)
	}
	return nil
}

// withoutHints are the flags of the cluster measured for comparison.
var withoutHints = []string{"--peer-close-hint=false", "--shutdown-handover=0"}

// FailoverSeries is one kind of event on one cluster: for each event, the
// longest time a writer went without a successful write around it.
type FailoverSeries struct {
	Label string          `json:"label"`
	Gaps  []time.Duration `json:"gaps_ns"`
	// Terms is how many terms each event's election took (more than one:
	// a split vote or a failed campaign).
	Terms []uint64 `json:"terms"`
	// Events are each event's moments, to line up with the nodes' logs
	// (--node-log-level debug) for a breakdown of the gap.
	Events []FailoverEvent `json:"events"`
}

// FailoverEvent is when one event happened, in Unix nanoseconds of this
// machine's clock (the nodes' logs use the same clock).
type FailoverEvent struct {
	// Leader is the node signalled; Signalled when; Exited when its
	// process had exited.
	Leader    uint64 `json:"leader"`
	Signalled int64  `json:"signalled_unix_ns"`
	Exited    int64  `json:"exited_unix_ns"`
	// GapStart and GapEnd are the acknowledgements around the longest
	// gap: the last write acknowledged before it, the first after.
	GapStart int64 `json:"gap_start_unix_ns"`
	GapEnd   int64 `json:"gap_end_unix_ns"`
	// Attempts are the writer's HTTP attempts that ended from the last
	// acknowledgement before the signal to the end of the gap.
	Attempts []FailoverAttempt `json:"attempts,omitempty"`
	// Steps are the hand-over's steps (Step*), in nanoseconds after the
	// signal, from the nodes' election trace (NodeLogLevel "debug" and
	// NodeLogFormat "json") and the writer's attempts.
	Steps map[string]int64 `json:"steps_ns,omitempty"`
}

// FaultRun is what one cluster did under the fault run.
type FaultRun struct {
	Label      string  `json:"label"`
	Seconds    float64 `json:"seconds"`
	Cuts       int     `json:"cuts"`
	Partitions int     `json:"partitions"`
	// Elections is how far the term rose; LeaderChanges how often the
	// leader named by the nodes changed, seen by polling every 50 ms.
	Elections     uint64 `json:"elections"`
	LeaderChanges int    `json:"leader_changes"`
}

// FailoverBenchReport is what RunFailoverBench measured.
type FailoverBenchReport struct {
	Nodes   int    `json:"nodes"`
	Tick    string `json:"tick"`
	Machine string `json:"machine"`
	// WriteP50 is the writer's median write latency on the default
	// cluster when nothing happens: every gap includes about one write.
	WriteP50 time.Duration    `json:"write_p50_ns"`
	Series   []FailoverSeries `json:"series"`
	Faults   []FaultRun       `json:"faults,omitempty"`
}

// RunFailoverBench measures how long writes stop when the leader's
// process dies (SIGKILL) and when it is stopped (SIGTERM), on a cluster
// with coord's defaults and one without the hint and the hand-over, the
// events alternating between the two; then the fault run, if asked.
func RunFailoverBench(ctx context.Context, cfg FailoverBenchConfig) (FailoverBenchReport, error) {
	r := FailoverBenchReport{Nodes: cfg.Nodes, Tick: cfg.Tick.String(), Machine: bench.Machine()}
	if err := cfg.Validate(); err != nil {
		return r, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 16))
	if cfg.Kills > 0 || cfg.Stops > 0 {
		if err := r.measureEvents(ctx, cfg, rng); err != nil {
			return r, err
		}
	}
	if cfg.Faults > 0 {
		runs, err := faultRuns(ctx, cfg, rng)
		if err != nil {
			return r, err
		}
		r.Faults = runs
	}
	return r, nil
}

// startFor starts one cluster of cfg in Dir/sub with extra flags.
func startFor(ctx context.Context, cfg FailoverBenchConfig, sub string, proxies bool, extra []string) (*Cluster, error) {
	dir := filepath.Join(cfg.Dir, sub)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := append([]string{"--tick", cfg.Tick.String()}, extra...)
	if cfg.NodeLogLevel != "" {
		args = append(args, "--log-level", cfg.NodeLogLevel)
	}
	if cfg.NodeLogFormat != "" {
		args = append(args, "--log-format", cfg.NodeLogFormat)
	}
	c, err := Start(ctx, Config{Nodes: cfg.Nodes, Dir: dir, Binary: cfg.Binary, Insecure: cfg.Insecure, SelfServe: cfg.SelfServe, Proxies: proxies, Args: args})
	if err != nil {
		return nil, err
	}
	// A minute: long election timeouts (the test's 10 to 20 s) delay the
	// first leader too.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := c.WaitLeader(wctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (r *FailoverBenchReport) measureEvents(ctx context.Context, cfg FailoverBenchConfig, rng *rand.Rand) error {
	hinted, err := startFor(ctx, cfg, "defaults", false, nil)
	if err != nil {
		return err
	}
	defer hinted.Close()
	plain, err := startFor(ctx, cfg, "without", false, withoutHints)
	if err != nil {
		return err
	}
	defer plain.Close()
	if r.WriteP50, err = hinted.writeLatency(ctx); err != nil {
		return err
	}
	kill := func(c *Cluster, id uint64) error { return c.Kill(id) }
	stop := func(c *Cluster, id uint64) error { return c.Stop(id) }
	kinds := []struct {
		n   int
		act func(*Cluster, uint64) error
		on  [2]string
	}{
		{cfg.Kills, kill, [2]string{"leader killed (SIGKILL), hint", "leader killed (SIGKILL), no hint"}},
		{cfg.Stops, stop, [2]string{"leader stopped (SIGTERM), hand-over", "leader stopped (SIGTERM), no hand-over"}},
	}
	for _, k := range kinds {
		if k.n == 0 {
			continue
		}
		series := [2]FailoverSeries{{Label: k.on[0]}, {Label: k.on[1]}}
		for range k.n {
			for i, c := range []*Cluster{hinted, plain} {
				ev, terms, err := c.outage(ctx, rng, k.act, time.Minute)
				if err != nil {
					return fmt.Errorf("%s: %w", series[i].Label, err)
				}
				series[i].Gaps = append(series[i].Gaps, time.Duration(ev.GapEnd-ev.GapStart))
				series[i].Terms = append(series[i].Terms, terms)
				series[i].Events = append(series[i].Events, ev)
			}
		}
		r.Series = append(r.Series, series[0], series[1])
	}
	return addSteps(r.Series, hinted, kinds[1].on[0])
}

// addSteps lays each event of the series labelled label (the default
// cluster's SIGTERMs, the events that hand over) end to end with the
// nodes' election trace of c, if they wrote one.
func addSteps(series []FailoverSeries, c *Cluster, label string) error {
	var logs []string
	for _, n := range c.Nodes() {
		logs = append(logs, n.Log)
	}
	lines, err := readTrace(logs)
	if err != nil {
		return fmt.Errorf("localcluster: read the nodes' trace: %w", err)
	}
	if len(lines) == 0 {
		return nil
	}
	for i := range series {
		if series[i].Label != label {
			continue
		}
		for j := range series[i].Events {
			series[i].Events[j].addSteps(lines)
		}
	}
	return nil
}

// writer writes to one key in a closed loop, recording when each write
// was acknowledged; it polls fast (1-5 ms between rounds of attempts, 500
// ms per attempt) so that the client adds little to the gap it measures.
type writer struct {
	mu    sync.Mutex
	acked []time.Time
	lat   []time.Duration
	stop  context.CancelFunc
	done  chan struct{}
	// attempts records every HTTP attempt of the writer's writes.
	attempts attemptLog
}

func (c *Cluster) startWriter(ctx context.Context, key string) (*writer, error) {
	cc := c.ClientConfig()
	cc.AttemptTimeout, cc.BackoffMin, cc.BackoffMax = 500*time.Millisecond, time.Millisecond, 5*time.Millisecond
	w := &writer{done: make(chan struct{})}
	cc.HTTPClient = recordingHTTPClient(cc.TLS, cc.AttemptTimeout, &w.attempts)
	cl, err := client.New(cc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w.stop = cancel
	value := make([]byte, 100)
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			t0 := time.Now()
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := cl.Put(wctx, key, value)
			cancel()
			if err != nil {
				continue
			}
			now := time.Now()
			w.mu.Lock()
			w.acked = append(w.acked, now)
			w.lat = append(w.lat, now.Sub(t0))
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// waitAcked waits until n writes were acknowledged after since.
func (w *writer) waitAcked(ctx context.Context, since time.Time, n int) error {
	for {
		w.mu.Lock()
		i, _ := slices.BinarySearchFunc(w.acked, since, func(a, b time.Time) int { return a.Compare(b) })
		got := len(w.acked) - i
		w.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localcluster: %d of %d writes acknowledged: %w", got, n, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func (w *writer) close() {
	w.stop()
	<-w.done
}

// gapAround returns the two acknowledgements, from the last one before t
// on, with the longest time between them: how long the writer saw no
// write succeed around t (at least one write's latency).
func (w *writer) gapAround(t time.Time) (start, end time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i, _ := slices.BinarySearchFunc(w.acked, t, func(a, b time.Time) int { return a.Compare(b) })
	for j := max(1, i); j < len(w.acked); j++ {
		if w.acked[j].Sub(w.acked[j-1]) > end.Sub(start) {
			start, end = w.acked[j-1], w.acked[j]
		}
	}
	return start, end
}

// lastAckBefore returns the last acknowledgement before t (t if none).
func (w *writer) lastAckBefore(t time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	i, _ := slices.BinarySearchFunc(w.acked, t, func(a, b time.Time) int { return a.Compare(b) })
	if i == 0 {
		return t
	}
	return w.acked[i-1]
}

// writeLatency is the writer's median latency over 200 writes.
func (c *Cluster) writeLatency(ctx context.Context) (time.Duration, error) {
	w, err := c.startWriter(ctx, "failover/latency")
	if err != nil {
		return 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = w.waitAcked(wctx, time.Time{}, 200)
	w.close()
	if err != nil {
		return 0, err
	}
	lat := slices.Sorted(slices.Values(w.lat))
	return lat[len(lat)/2], nil
}

// outage does act to the leader while a writer writes, at a random moment
// within a heartbeat-sized window, and returns when it acted and the
// longest gap between acknowledged writes around it, and the terms the
// election took; then it restarts the node and waits until every node
// follows one leader. It fails if writes do not resume within bound of
// the act.
func (c *Cluster) outage(ctx context.Context, rng *rand.Rand, act func(*Cluster, uint64) error, bound time.Duration) (FailoverEvent, uint64, error) {
	var ev FailoverEvent
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		return ev, 0, err
	}
	before, err := c.Status(ctx, leader)
	if err != nil {
		return ev, 0, err
	}
	w, err := c.startWriter(ctx, "failover/writer")
	if err != nil {
		return ev, 0, err
	}
	defer w.close()
	if err := w.waitAcked(ctx, time.Time{}, 10); err != nil {
		return ev, 0, err
	}
	// A random phase against the heartbeats (every 100 ms by default).
	time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
	t0 := time.Now()
	if err := act(c, leader); err != nil {
		return ev, 0, err
	}
	// Count the acknowledgements from the process's exit (act waits for
	// it) on: on a loaded machine a leader may serve ten writes after the
	// signal before it stops, and counting from the signal would end the
	// window before the outage began.
	exited := time.Now()
	bctx, cancelBound := context.WithTimeout(ctx, bound)
	err = w.waitAcked(bctx, exited, 10)
	cancelBound()
	if err != nil {
		return ev, 0, err
	}
	start, end := w.gapAround(t0)
	ev = FailoverEvent{Leader: leader, Signalled: t0.UnixNano(), Exited: exited.UnixNano(), GapStart: start.UnixNano(), GapEnd: end.UnixNano(),
		Attempts: w.attempts.between(w.lastAckBefore(t0).UnixNano(), end.UnixNano())}
	next, err := c.WaitLeader(ctx)
	if err != nil {
		return ev, 0, err
	}
	var terms uint64
	if st, err := c.Status(ctx, next); err == nil {
		terms = st.Term - before.Term
	}
	w.close()
	if err := c.Restart(ctx, leader); err != nil {
		return ev, 0, err
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		return ev, 0, err
	}
	return ev, terms, nil
}

// CutLink resets the connections between nodes a and b (through their
// fault proxy), once: new ones are accepted at once, as after a
// middlebox's reset. Both processes live, so the close is a false hint.
func (c *Cluster) CutLink(a, b uint64) error {
	key := [2]uint64{min(a, b), max(a, b)}
	c.mu.Lock()
	p := c.proxies[key]
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("%w: no proxy between nodes %d and %d (started without proxies?)", ErrInvalid, a, b)
	}
	p.Cut()
	return nil
}

// faultRuns runs both clusters, behind fault proxies, through the same
// random faults for cfg.Faults: every 0.2 to 1 s, either a cut of the
// connections between two random nodes, or a silent partition (a
// blackhole) of a random node from the others for 0.1 to 3 s (long
// enough, sometimes, to need a new leader). No process dies.
func faultRuns(ctx context.Context, cfg FailoverBenchConfig, rng *rand.Rand) ([]FaultRun, error) {
	hinted, err := startFor(ctx, cfg, "faults-defaults", true, nil)
	if err != nil {
		return nil, err
	}
	defer hinted.Close()
	plain, err := startFor(ctx, cfg, "faults-without", true, withoutHints)
	if err != nil {
		return nil, err
	}
	defer plain.Close()
	clusters := []*Cluster{hinted, plain}
	runs := []FaultRun{{Label: "hint on (defaults)"}, {Label: "hint off"}}
	startTerms := make([]uint64, 2)
	for i, c := range clusters {
		if startTerms[i], err = c.maxTerm(ctx); err != nil {
			return nil, err
		}
	}
	pctx, stopPolling := context.WithCancel(ctx)
	changes := make([]int, 2)
	var wg sync.WaitGroup
	for i, c := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			changes[i] = c.countLeaderChanges(pctx)
		}()
	}
	start := time.Now()
	ids := hinted.IDs()
	for time.Since(start) < cfg.Faults && ctx.Err() == nil {
		time.Sleep(200*time.Millisecond + time.Duration(rng.IntN(800))*time.Millisecond)
		if rng.IntN(2) == 0 {
			a := ids[rng.IntN(len(ids))]
			b := ids[rng.IntN(len(ids))]
			if a == b {
				continue
			}
			for i, c := range clusters {
				if err := c.CutLink(a, b); err != nil {
					stopPolling()
					wg.Wait()
					return nil, err
				}
				runs[i].Cuts++
			}
			continue
		}
		id := ids[rng.IntN(len(ids))]
		hold := 100*time.Millisecond + time.Duration(rng.IntN(2900))*time.Millisecond
		for i, c := range clusters {
			if err := c.Blackhole([]uint64{id}, c.Except(id)); err != nil {
				stopPolling()
				wg.Wait()
				return nil, err
			}
			runs[i].Partitions++
		}
		time.Sleep(hold)
		for _, c := range clusters {
			c.Heal()
		}
	}
	// Let a last election settle before counting.
	time.Sleep(3 * time.Second)
	stopPolling()
	wg.Wait()
	secs := time.Since(start).Seconds()
	for i, c := range clusters {
		end, err := c.maxTerm(ctx)
		if err != nil {
			return nil, err
		}
		runs[i].Seconds, runs[i].Elections, runs[i].LeaderChanges = secs, end-startTerms[i], changes[i]
	}
	return runs, ctx.Err()
}

// maxTerm is the highest term any node reports.
func (c *Cluster) maxTerm(ctx context.Context) (uint64, error) {
	var term uint64
	var errs []error
	for _, id := range c.IDs() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.Status(sctx, id)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		term = max(term, st.Term)
	}
	if term == 0 {
		return 0, errors.Join(errs...)
	}
	return term, nil
}

// countLeaderChanges polls the nodes every 50 ms until ctx ends and counts
// how often the leader a majority names changed.
func (c *Cluster) countLeaderChanges(ctx context.Context) int {
	var last uint64
	changes := 0
	ids := c.IDs()
	for ctx.Err() == nil {
		named := map[uint64]int{}
		for _, id := range ids {
			sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			st, err := c.Status(sctx, id)
			cancel()
			if err == nil && st.Leader != 0 {
				named[st.Leader]++
			}
		}
		for leader, n := range named {
			if n > len(ids)/2 && leader != last {
				if last != 0 {
					changes++
				}
				last = leader
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return changes
}

// WriteText prints the report: for each series the gaps' distribution,
// then the fault run.
func (r FailoverBenchReport) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "%d-node clusters on loopback, fsync on, tick %s (elections after 10-20 ticks)\n", r.Nodes, r.Tick)
	fmt.Fprintf(w, "machine: %s\n", r.Machine)
	if len(r.Series) > 0 {
		if err := r.writeSeries(w); err != nil {
			return err
		}
	}
	return r.writeFaults(w)
}

func (r FailoverBenchReport) writeSeries(w io.Writer) error {
	fmt.Fprintf(w, "\ntime without a successful write around each event (the longest gap between two acknowledged writes; a write takes %s at the median when nothing happens):\n\n", fmtMS(r.WriteP50))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "event\tn\tmin\tp50\tp90\tp99\tmax\t>1 term\t")
	for _, s := range r.Series {
		if len(s.Gaps) == 0 {
			continue
		}
		g := slices.Sorted(slices.Values(s.Gaps))
		q := func(p int) time.Duration { return bench.Percentile(g, p) }
		multi := 0
		for _, t := range s.Terms {
			if t > 1 {
				multi++
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t\n", s.Label, len(g), fmtMS(g[0]), fmtMS(q(50)), fmtMS(q(90)), fmtMS(q(99)), fmtMS(g[len(g)-1]), multi)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Series {
		if err := writeSteps(w, s.Label, s.Events); err != nil {
			return err
		}
	}
	return nil
}

func (r FailoverBenchReport) writeFaults(w io.Writer) error {
	if len(r.Faults) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nfault run (connection cuts and silent partitions through fault proxies, no process deaths; the same faults on both):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cluster\tseconds\tcuts\tpartitions\telections\tleader changes\t")
	for _, f := range r.Faults {
		fmt.Fprintf(tw, "%s\t%.0f\t%d\t%d\t%d\t%d\t\n", f.Label, f.Seconds, f.Cuts, f.Partitions, f.Elections, f.LeaderChanges)
	}
	return tw.Flush()
}

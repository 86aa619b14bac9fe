package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"coord/client"
	"coord/server/localcluster"

	"github.com/anishathalye/porcupine"
)

// ErrInvalid means a Config is out of range.
var ErrInvalid = errors.New("chaos: invalid config")

// Config configures a run.
type Config struct {
	// Nodes is the cluster size (3 or 5, say).
	Nodes int
	// Duration is how long the clients and the nemesis run.
	Duration time.Duration
	// Clients is the number of concurrent clients; Keys the keys they share.
	Clients, Keys int
	// Seed drives the nemesis's and the clients' choices.
	Seed uint64
	// Dir is the scratch directory (data, logs, the visualization).
	Dir string
	// Binary, Prefix and SelfServe say how to start `coord server` (see
	// localcluster.Config).
	Binary    string
	Prefix    []string
	SelfServe bool
	// ServerArgs are extra flags for every server (--tick 20ms).
	ServerArgs []string
	// Insecure runs the cluster without TLS and tokens. By default it runs
	// as coord cluster up does: mutual TLS between nodes, HTTPS, tokens.
	Insecure bool
	// Logf, if set, narrates the nemesis.
	Logf func(format string, args ...any)
}

func (cfg Config) valid() bool {
	return cfg.Nodes >= 1 && cfg.Duration > 0 && cfg.Clients >= 1 && cfg.Keys >= 1 && cfg.Dir != "" && cfg.Binary != ""
}

// logf returns cfg.Logf, or a function that says nothing.
func (cfg Config) logf() func(format string, args ...any) {
	if cfg.Logf == nil {
		return func(string, ...any) {}
	}
	return cfg.Logf
}

// start starts the cluster behind fault proxies and waits (up to 30 s)
// for its first leader.
func (cfg Config) start(ctx context.Context) (*localcluster.Cluster, error) {
	c, err := localcluster.Start(ctx, localcluster.Config{Nodes: cfg.Nodes, Dir: cfg.Dir, Binary: cfg.Binary,
		Prefix: cfg.Prefix, SelfServe: cfg.SelfServe, Args: cfg.ServerArgs, Proxies: true, Insecure: cfg.Insecure})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.WaitLeader(wctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Report is what a run observed.
type Report struct {
	// Ops is the number of operations in the history; Unknown of them were
	// writes whose outcome the client never learned; Failed were reads that
	// got no answer and writes the client reported not applied (both left
	// out of the history).
	Ops, Unknown, Failed int
	// Acked is the number of acknowledged writes.
	Acked int
	// Faults lists the nemesis's actions, in order.
	Faults []string
	// Secure says the cluster ran with TLS and tokens.
	Secure bool
	// Linearizable is porcupine's verdict; Result its raw result.
	Linearizable bool
	Result       porcupine.CheckResult
	// Visualization is an HTML file showing the history when it is not
	// linearizable.
	Visualization string
	// Diverged lists the nodes whose final state differs from the first
	// node's, key by key.
	Diverged []string
}

// recorder collects the history.
type recorder struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

func (r *recorder) now() int64 { return int64(time.Since(r.start)) }

func (r *recorder) add(clientID int, in Input, call int64, out Output, ret int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: clientID, Input: in, Call: call, Output: out, Return: ret})
}

// Run runs one chaos experiment and checks its history. It returns an error
// only when it could not run; a violation is in the Report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if !cfg.valid() {
		return nil, fmt.Errorf("%w: %+v", ErrInvalid, cfg)
	}
	logf := cfg.logf()
	c, err := cfg.start(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()

	rep := &Report{Secure: c.Security() != nil}
	rec := &recorder{start: time.Now()}
	runCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	counts := make([]clientCounts, cfg.Clients) // one slot per client goroutine
	for i := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[i] = runClient(runCtx, c.ClientConfig(), i, cfg, rec)
		}()
	}
	rep.Faults = nemesis(runCtx, c, cfg, logf)
	wg.Wait()
	for _, n := range counts {
		rep.Failed += n.failed
		rep.Unknown += n.unknown
		rep.Acked += n.acked
	}

	// Heal everything, then read every key once more: these reads are part
	// of the history, so an acknowledged write that was lost shows up.
	c.Heal()
	for _, id := range c.IDs() {
		_ = c.Resume(id)
		if !c.Running(id) {
			if err := c.Restart(ctx, id); err != nil {
				return nil, fmt.Errorf("chaos: restart node %d after the run: %w", id, err)
			}
		}
	}
	if err := finalReads(ctx, c, cfg, rec); err != nil {
		return nil, err
	}
	rep.Diverged, err = converged(ctx, c, cfg)
	if err != nil {
		return nil, err
	}

	// Unknown outcomes may take effect any time after their call.
	end := rec.now() + 1
	for i := range rec.ops {
		if rec.ops[i].Output.(Output).Unknown {
			rec.ops[i].Return = end + int64(i)
		}
	}
	rep.Ops = len(rec.ops)
	model := Model.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, rec.ops, 2*time.Minute)
	rep.Result = res
	rep.Linearizable = res == porcupine.Ok
	if res != porcupine.Ok {
		path := filepath.Join(cfg.Dir, "history.html")
		if f, err := os.Create(path); err == nil {
			_ = porcupine.Visualize(model, info, f)
			f.Close()
			rep.Visualization = path
		}
	}
	return rep, nil
}

// clientCounts is what one client saw: reads unanswered, writes of
// unknown outcome, writes acknowledged.
type clientCounts struct{ failed, unknown, acked int }

// runClient performs random operations until ctx ends. Each operation has
// its own deadline; a write that misses it has an unknown outcome.
func runClient(ctx context.Context, ccfg client.Config, id int, cfg Config, rec *recorder) (counts clientCounts) {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(id)+1))
	ccfg.AttemptTimeout = 500 * time.Millisecond
	ccfg.BackoffMax = 100 * time.Millisecond
	cl, err := client.New(ccfg)
	if err != nil {
		return counts
	}
	lastRev := map[string]uint64{}
	for n := 0; ctx.Err() == nil; n++ {
		key := fmt.Sprintf("k%d", rng.IntN(cfg.Keys))
		in := Input{Key: key, Value: fmt.Sprintf("c%d-%d", id, n)}
		switch r := rng.IntN(10); {
		case r < 4:
			in.Kind = Get
		case r < 7:
			in.Kind = Put
		default:
			in.Kind = CAS
			in.Prev = lastRev[key]
		}
		// Some operations give up early, so that the history holds writes
		// of unknown outcome that the checker must place or drop.
		timeout := 2 * time.Second
		if rng.IntN(4) == 0 {
			timeout = time.Duration(100+rng.IntN(400)) * time.Millisecond
		}
		octx, cancel := context.WithTimeout(context.Background(), timeout)
		call := rec.now()
		out, err := do(octx, cl, in)
		ret := rec.now()
		cancel()
		switch {
		case err != nil && (in.Kind == Get || !errors.Is(err, client.ErrUnknown)):
			// A read changes nothing; a write the client reports as not
			// unknown provably did not apply (docs/API.md): leaving it out
			// of the history checks that claim, since a value no recorded
			// write wrote would not linearize.
			counts.failed++
			continue
		case err != nil:
			out = Output{Unknown: true}
			counts.unknown++
		case in.Kind != Get && out.OK:
			counts.acked++
		}
		if out.Rev != 0 {
			lastRev[key] = out.Rev
		}
		rec.add(id, in, call, out, ret)
	}
	return counts
}

// do performs one operation. A definite answer (success, not found, a
// conflict) is an Output; anything else is an error.
func do(ctx context.Context, cl *client.Client, in Input) (Output, error) {
	switch in.Kind {
	case Get:
		kv, err := cl.Get(ctx, in.Key)
		if errors.Is(err, client.ErrNotFound) {
			return Output{OK: true}, nil
		}
		if err != nil {
			return Output{}, err
		}
		return Output{OK: true, Exists: true, Value: string(kv.Value), Rev: kv.Revision}, nil
	case Put:
		rev, err := cl.Put(ctx, in.Key, []byte(in.Value))
		if err != nil {
			return Output{}, err
		}
		return Output{OK: true, Rev: rev}, nil
	default:
		rev, err := cl.PutIf(ctx, in.Key, []byte(in.Value), in.Prev)
		var ce *client.Error
		if errors.Is(err, client.ErrConflict) && errors.As(err, &ce) {
			return Output{Rev: ce.Revision}, nil
		}
		if err != nil {
			return Output{}, err
		}
		return Output{OK: true, Rev: rev}, nil
	}
}

// nemesis breaks the cluster until ctx ends, one fault at a time, and
// repairs each before the next; it returns what it did.
func nemesis(ctx context.Context, c *localcluster.Cluster, cfg Config, logf func(string, ...any)) []string {
	rng := rand.New(rand.NewPCG(cfg.Seed, math.MaxUint32))
	var done []string
	ids := c.IDs()
	tolerated := (len(ids) - 1) / 2
	pause := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	leader := func() uint64 {
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		l, _ := c.WaitLeader(wctx)
		return l
	}
	for ctx.Err() == nil {
		if !pause(time.Duration(200+rng.IntN(500)) * time.Millisecond) {
			break
		}
		victims := pick(rng, ids, 1+rng.IntN(max(tolerated, 1)))
		hold := time.Duration(300+rng.IntN(1200)) * time.Millisecond
		var what string
		switch rng.IntN(6) {
		case 0: // kill -9, then restart from the data directory
			for _, v := range victims {
				_ = c.Kill(v)
			}
			what = fmt.Sprintf("kill -9 %v for %v", victims, hold)
			pause(hold)
			for _, v := range victims {
				rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if err := c.Restart(rctx, v); err != nil {
					logf("restart %d: %v", v, err)
				}
				cancel()
			}
		case 1: // SIGSTOP, then SIGCONT
			for _, v := range victims {
				_ = c.Pause(v)
			}
			what = fmt.Sprintf("pause %v for %v", victims, hold)
			pause(hold)
			for _, v := range victims {
				_ = c.Resume(v)
			}
		case 2: // partition a minority away
			_ = c.Partition(victims, c.Except(victims...))
			what = fmt.Sprintf("partition %v | %v for %v", victims, c.Except(victims...), hold)
			pause(hold)
			c.Heal()
		case 3: // isolate the leader
			l := leader()
			if l == 0 {
				continue
			}
			_ = c.Isolate(l)
			what = fmt.Sprintf("isolate leader %d for %v", l, hold)
			pause(hold)
			c.Heal()
		case 5: // a silent partition: connections stay up and carry nothing
			_ = c.Blackhole(victims, c.Except(victims...))
			what = fmt.Sprintf("blackhole %v | %v for %v", victims, c.Except(victims...), hold)
			pause(hold)
			c.Heal()
		default: // 4: kill the leader
			l := leader()
			if l == 0 {
				continue
			}
			_ = c.Kill(l)
			what = fmt.Sprintf("kill -9 leader %d for %v", l, hold)
			pause(hold)
			rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := c.Restart(rctx, l); err != nil {
				logf("restart %d: %v", l, err)
			}
			cancel()
		}
		logf("nemesis: %s", what)
		done = append(done, what)
	}
	return done
}

func pick(rng *rand.Rand, ids []uint64, n int) []uint64 {
	s := slices.Clone(ids)
	rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	out := s[:n]
	slices.Sort(out)
	return out
}

// finalReads reads every key linearizably, retrying until the healed
// cluster answers, and adds the reads to the history.
func finalReads(ctx context.Context, c *localcluster.Cluster, cfg Config, rec *recorder) error {
	cl, err := client.New(c.ClientConfig())
	if err != nil {
		return err
	}
	for k := range cfg.Keys {
		in := Input{Kind: Get, Key: fmt.Sprintf("k%d", k)}
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		call := rec.now()
		out, err := do(rctx, cl, in)
		cancel()
		if err != nil {
			return fmt.Errorf("chaos: final read of %s: the healed cluster did not answer: %w", in.Key, err)
		}
		rec.add(cfg.Clients, in, call, out, rec.now())
	}
	return nil
}

// converged waits until every node has applied the leader's commit index,
// then compares each node's local (stale) view of every key with the
// leader's.
func converged(ctx context.Context, c *localcluster.Cluster, cfg Config) ([]string, error) {
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	leader, err := c.WaitLeader(wctx)
	if err != nil {
		return nil, err
	}
	lst, err := c.Status(wctx, leader)
	if err != nil {
		return nil, err
	}
	for _, id := range c.IDs() {
		for {
			st, err := c.Status(wctx, id)
			if err == nil && st.Applied >= lst.Commit {
				break
			}
			select {
			case <-wctx.Done():
				return nil, fmt.Errorf("chaos: node %d never caught up to %d: %w", id, lst.Commit, wctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	var diverged []string
	nodes := c.Nodes()
	clients := make([]*client.Client, len(nodes)) // one per node: stale reads ask it alone
	for i, n := range nodes {
		if clients[i], err = client.New(c.Access().ClientConfig(n.HTTP)); err != nil {
			return nil, err
		}
	}
	var want []string
	for k := range cfg.Keys {
		for i, n := range nodes {
			kv, err := clients[i].Get(wctx, fmt.Sprintf("k%d", k), client.Stale())
			got := fmt.Sprintf("%q@%d", kv.Value, kv.Revision)
			if errors.Is(err, client.ErrNotFound) {
				got = "absent"
			} else if err != nil {
				return nil, err
			}
			if i == 0 {
				want = append(want, got)
			} else if got != want[k] {
				diverged = append(diverged, fmt.Sprintf("node %d key k%d: %s, node %d: %s", n.ID, k, got, nodes[0].ID, want[k]))
			}
		}
	}
	return diverged, nil
}

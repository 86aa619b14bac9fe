// Command loadgen is a load generator for coord's cluster and for etcd,
// so that the two are measured by the same code side by side (issue 21;
// scripts/bench-vs-etcd.sh, issue 15, is to drive it). It writes --keys
// keys of --value-bytes bytes from --clients concurrent clients (the load
// phase), then overwrites random keys among them for --duration (the
// steady phase), and prints one line per phase: writes per second, the
// median, 99th percentile and worst write latency, and, for --pids, the
// peak resident memory of those processes (the servers) and the CPU they
// used in the phase. --mode reads makes the steady phase linearizable
// reads of random keys instead (coord's default read; etcd's default,
// serializable=false), so that reads through a follower can be compared.
// --mode leases renews leases (leases.go); --mode watch measures watchers of
// one key under a background write load (watch.go). --batch N makes the
// load phase write N keys per request, as one atomic batch (coord's
// POST /v1/batch, etcd's Txn): a bulk load. --spread makes coord's clients
// send their requests to every member in turn (client.Config.Spread), as
// etcd's client balances them; --request-endpoints gives the clients
// other endpoints than --endpoints (etcd's leader only, say).
//
//	loadgen --target coord --endpoints http://127.0.0.1:8001,http://127.0.0.1:8002 --keys 500000
//	loadgen --target etcd --endpoints 127.0.0.1:2379 --keys 500000 --pids 123,124,125
//
// It is in a module of its own (coord/bench/scale) so that the main module does not
// carry benchmark-only dependencies.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"coord/client"

	clientv3 "go.etcd.io/etcd/client/v3"
)

type config struct {
	target     string
	endpoints  []string
	keys       int
	valueBytes int
	clients    int
	sessions   int
	duration   time.Duration
	prefix     string
	pids       []int
	dataDirs   []string // coord's data directories, to count snapshots in
	skipLoad   bool
	token      string
	// mode "leases": leases acquired once, then renewed every renewEvery
	// for duration.
	mode       string
	leases     int
	renewEvery time.Duration
	// mode "watch": watchers of one key written every watchEvery, under
	// a background load of rate writes a second to other keys.
	watchers    int
	watchEvery  time.Duration
	rate        int
	maxInflight int
	// attemptTimeout, if positive, replaces the coord client's
	// AttemptTimeout in --mode watch.
	attemptTimeout time.Duration
	// http2: coord clients speak h2c (--http2).
	http2 bool
	// wire: coord clients speak coord's multiplexed connection (--wire).
	wire bool
	// batch, above 1, makes the load phase write its keys that many at a
	// time, each group as one atomic batch (coord: POST /v1/batch; etcd:
	// a Txn of puts).
	batch int
	// spread: coord clients send their requests to the endpoints in turn
	// (client.Config.Spread) instead of to the leader (--spread).
	spread bool
	// requestEndpoints are the endpoints the clients' requests are given
	// (--request-endpoints; default: endpoints). The watchers of --mode
	// watch stay spread over endpoints, and --pids are still reported.
	requestEndpoints []string
	// steadyRounds is how many steady phases of duration run one after
	// the other on the loaded keys.
	steadyRounds int
}

func main() {
	var cfg config
	var endpoints, pids, dataDirs string
	flag.StringVar(&cfg.target, "target", "coord", "coord or etcd")
	flag.StringVar(&endpoints, "endpoints", "", "comma-separated API endpoints of the cluster")
	flag.IntVar(&cfg.keys, "keys", 10000, "keys to write in the load phase, and to overwrite in the steady phase")
	flag.IntVar(&cfg.valueBytes, "value-bytes", 256, "bytes per value")
	flag.IntVar(&cfg.clients, "clients", 64, "concurrent clients")
	flag.IntVar(&cfg.sessions, "sessions", 1, "coord client sessions the clients are spread over, each with a connection per client kept alive (bulk loads: --clients 256 --sessions 4)")
	flag.DurationVar(&cfg.duration, "duration", 30*time.Second, "length of the steady phase (0: none)")
	flag.StringVar(&cfg.prefix, "prefix", "bench/", "key prefix")
	flag.StringVar(&pids, "pids", "", "comma-separated server process IDs whose peak RSS and CPU to report")
	flag.StringVar(&dataDirs, "data-dirs", "", "comma-separated data directories of coord's servers: each phase also reports how many snapshots each server started in it (snapshots.go)")
	flag.BoolVar(&cfg.skipLoad, "skip-load", false, "skip the load phase (the keys are there already)")
	flag.IntVar(&cfg.steadyRounds, "steady-rounds", 1, "steady phases of --duration to run one after the other on the loaded keys, each reported, then their median rate")
	flag.StringVar(&cfg.token, "token", "", "bearer token (coord clusters run without --insecure)")
	flag.StringVar(&cfg.mode, "mode", "writes", "writes (load then overwrite keys), reads (load, then linearizable reads of random keys), leases (acquire --leases leases, then renew each every --renew-every) or watch (--watchers watchers of one key put every --watch-every, under --rate background writes/s to --keys other keys)")
	flag.IntVar(&cfg.leases, "leases", 10000, "leases, in --mode leases")
	flag.DurationVar(&cfg.renewEvery, "renew-every", 3*time.Second, "how often each lease is renewed, in --mode leases")
	flag.IntVar(&cfg.watchers, "watchers", 1000, "watchers of the watched key, in --mode watch")
	flag.DurationVar(&cfg.watchEvery, "watch-every", 100*time.Millisecond, "how often the watched key is put, in --mode watch")
	flag.IntVar(&cfg.rate, "rate", 5000, "background writes a second to other keys, open loop, in --mode watch")
	flag.IntVar(&cfg.maxInflight, "max-inflight", 1024, "most background writes in flight at once, in --mode watch (a write due beyond it is counted as not sent)")
	flag.DurationVar(&cfg.attemptTimeout, "attempt-timeout", 0, "coord client's AttemptTimeout in --mode watch: how long an attempt of a write goes unanswered before the client probes the node (GET /readyz) and abandons it unless it is ready (0: the client's default, 2 s; etcd's client has none, only the write's 10 s deadline)")
	flag.IntVar(&cfg.batch, "batch", 1, "keys per write in the load phase: above 1, each client writes that many consecutive keys as one atomic batch (coord's POST /v1/batch, etcd's Txn: at most 128 puts by etcd's default --max-txn-ops); ops and ops/s then count keys, the latencies are per batch")
	flag.BoolVar(&cfg.http2, "http2", false, "coord clients speak h2c (HTTP/2 in clear, one connection per session and node) instead of HTTP/1.1: the servers must run with --http2")
	flag.BoolVar(&cfg.wire, "wire", false, "coord clients send their requests over coord's multiplexed connection (one connection per session and node: the client's default transport) instead of HTTP/1.1, in --mode writes, reads and watch (the watchers' streams too); without it they speak HTTP/1.1 only (client.Config.NoWire), whatever the client's default")
	flag.BoolVar(&cfg.spread, "spread", false, "coord clients send their requests to the endpoints in turn (client.Config.Spread: followers forward the writes to the leader as Raft proposals and serve the reads), as etcd's client balances its requests, instead of to the leader they follow; every mode (in --mode leases the acquires spread, the renewals still go to the leader)")
	var requestEndpoints string
	flag.StringVar(&requestEndpoints, "request-endpoints", "", "comma-separated endpoints the clients' requests are given (default: --endpoints); the watchers of --mode watch still spread over --endpoints. With etcd's leader only, etcd's client sends every request to the leader, as coord's does by default (bench/scale/compare.sh, COMPARE_ETCD_LEADER_ONLY)")
	flag.Parse()
	cfg.endpoints = strings.Split(endpoints, ",")
	cfg.requestEndpoints = cfg.endpoints
	if requestEndpoints != "" {
		cfg.requestEndpoints = strings.Split(requestEndpoints, ",")
	}
	for _, p := range strings.Split(pids, ",") {
		if pid, err := strconv.Atoi(strings.TrimSpace(p)); err == nil {
			cfg.pids = append(cfg.pids, pid)
		}
	}
	if dataDirs != "" {
		cfg.dataDirs = strings.Split(dataDirs, ",")
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// putFunc writes one key.
type putFunc func(ctx context.Context, key string, value []byte) error

// batchFunc writes keys, every one with value, as one atomic write.
type batchFunc func(ctx context.Context, keys []string, value []byte) error

// requestsText says where the clients' requests go, for the header of
// every mode's report.
func requestsText(cfg config) string {
	n := len(cfg.requestEndpoints)
	switch {
	case cfg.target == "etcd" && n > 1:
		return fmt.Sprintf("requests balanced over %d endpoints (clientv3)", n)
	case cfg.target == "etcd":
		return "requests to " + cfg.requestEndpoints[0] + " only"
	case cfg.spread:
		return fmt.Sprintf("requests spread over %d endpoints (client.Config.Spread)", n)
	}
	return "requests to the leader (the coord client follows it)"
}

func run(cfg config) error {
	if cfg.spread && cfg.target != "coord" {
		return errors.New("--spread is for --target coord: etcd's client balances its requests over --request-endpoints (default --endpoints) already")
	}
	switch cfg.mode {
	case "leases":
		return runLeases(cfg)
	case "watch":
		return runWatch(cfg)
	}
	if endpointsMissing := len(cfg.endpoints) == 0 || cfg.endpoints[0] == ""; endpointsMissing || cfg.keys <= 0 || cfg.clients <= 0 {
		return errors.New("--endpoints, a positive --keys and --clients are required")
	}
	if cfg.mode != "writes" && cfg.mode != "reads" {
		return fmt.Errorf("--mode %q: want writes, reads, leases or watch", cfg.mode)
	}
	if cfg.batch < 1 {
		return fmt.Errorf("--batch %d: want 1 or more", cfg.batch)
	}
	var put, get putFunc
	var putBatch batchFunc
	switch cfg.target {
	case "coord":
		// One client (one session) per --sessions share of the
		// clients, each with its own connections, one per concurrent
		// request kept alive.
		sessions := make([]*client.Client, max(1, min(cfg.sessions, cfg.clients)))
		for i := range sessions {
			ccfg := client.DefaultConfig(cfg.requestEndpoints...)
			ccfg.Token, ccfg.Spread = cfg.token, cfg.spread
			perSession := (cfg.clients + len(sessions) - 1) / len(sessions)
			if cfg.wire {
				// The client's own transport: wire (its default).
			} else {
				ccfg.HTTP2 = cfg.http2
				tr := client.NewTransport(ccfg)
				tr.MaxIdleConnsPerHost = perSession + 8
				ccfg.HTTPClient = &http.Client{Transport: tr}
			}
			cl, err := client.New(ccfg)
			if err != nil {
				return err
			}
			sessions[i] = cl
		}
		of := func(ctx context.Context) *client.Client { return sessions[clientOf(ctx)%len(sessions)] }
		put = func(ctx context.Context, key string, value []byte) error {
			_, err := of(ctx).Put(ctx, key, value)
			return err
		}
		get = func(ctx context.Context, key string, _ []byte) error {
			_, err := of(ctx).Get(ctx, key)
			return err
		}
		putBatch = func(ctx context.Context, keys []string, value []byte) error {
			ops := make([]client.BatchOp, len(keys))
			for i, key := range keys {
				ops[i] = client.BatchPut(key, value)
			}
			_, err := of(ctx).Batch(ctx, ops...)
			return err
		}
	case "etcd":
		cl, err := clientv3.New(clientv3.Config{Endpoints: cfg.requestEndpoints, DialTimeout: 5 * time.Second})
		if err != nil {
			return err
		}
		defer cl.Close()
		put = func(ctx context.Context, key string, value []byte) error {
			_, err := cl.Put(ctx, key, string(value))
			return err
		}
		get = func(ctx context.Context, key string, _ []byte) error {
			r, err := cl.Get(ctx, key)
			if err == nil && len(r.Kvs) != 1 {
				err = fmt.Errorf("%s: %d keys, want 1", key, len(r.Kvs))
			}
			return err
		}
		putBatch = func(ctx context.Context, keys []string, value []byte) error {
			ops := make([]clientv3.Op, len(keys))
			for i, key := range keys {
				ops[i] = clientv3.OpPut(key, string(value))
			}
			_, err := cl.Txn(ctx).Then(ops...).Commit()
			return err
		}
	default:
		return fmt.Errorf("--target %q: want coord or etcd", cfg.target)
	}
	fmt.Printf("# %s, %d keys of %d bytes, %d clients, %s\n", cfg.target, cfg.keys, cfg.valueBytes, cfg.clients, requestsText(cfg))
	fmt.Printf("%-6s %-6s %9s %10s %9s %9s %9s %9s %9s\n", "target", "phase", "ops", "ops/s", "p50 ms", "p99 ms", "max ms", "rss MB", "cpu s")
	if !cfg.skipLoad {
		var next atomic.Int64
		load := each(cfg, put)
		if cfg.batch > 1 {
			fmt.Printf("# load in batches of %d keys: ops and ops/s count keys; p50, p99 and max are per batch\n", cfg.batch)
			load = batchOf(cfg, putBatch)
		}
		if _, err := phase(cfg, load, "load", func(*rand.Rand) (int, bool) {
			i := next.Add(int64(cfg.batch)) - int64(cfg.batch)
			return int(i), i < int64(cfg.keys)
		}); err != nil {
			return err
		}
	}
	if cfg.duration > 0 {
		end := time.Now().Add(cfg.duration)
		if cfg.mode == "reads" {
			_, err := phase(cfg, each(cfg, get), "reads", func(rng *rand.Rand) (int, bool) {
				return rng.IntN(cfg.keys), time.Now().Before(end)
			})
			return err
		}
		return steady(cfg, put)
	}
	return nil
}

// steady runs cfg.steadyRounds steady phases of random overwrites, one
// after the other, and with more than one prints their median rate:
// a single 30 s phase at 500k keys holds one snapshot per server or none,
// early or late, and its rate swings with that (issue 21, `steady2`).
func steady(cfg config, put putFunc) error {
	var rates []float64
	for range max(cfg.steadyRounds, 1) {
		end := time.Now().Add(cfg.duration)
		rate, err := phase(cfg, each(cfg, put), "steady", func(rng *rand.Rand) (int, bool) {
			return rng.IntN(cfg.keys), time.Now().Before(end)
		})
		if err != nil {
			return err
		}
		rates = append(rates, rate)
	}
	if len(rates) > 1 {
		fmt.Printf("# steady: %d rounds of %v, writes/s median %.0f (each: %s)\n", len(rates), cfg.duration, median(rates), strings.Trim(fmt.Sprint(roundAll(rates)), "[]"))
	}
	return nil
}

// roundAll returns xs rounded to whole numbers, for printing.
func roundAll(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(math.Round(x))
	}
	return out
}

// writeFunc writes the key numbered i, or the keys from it, and says how
// many it wrote.
type writeFunc func(ctx context.Context, i int, value []byte) (keys int, err error)

// each returns a writeFunc that does put (or get) on the key numbered i.
func each(cfg config, put putFunc) writeFunc {
	return func(ctx context.Context, i int, value []byte) (int, error) {
		return 1, put(ctx, fmt.Sprintf("%s%08d", cfg.prefix, i), value)
	}
}

// batchOf returns a writeFunc that writes, as one batch, the key numbered
// i and the cfg.batch-1 keys after it (fewer at the end of the keys).
func batchOf(cfg config, putBatch batchFunc) writeFunc {
	return func(ctx context.Context, i int, value []byte) (int, error) {
		keys := make([]string, 0, cfg.batch)
		for j := i; j < min(i+cfg.batch, cfg.keys); j++ {
			keys = append(keys, fmt.Sprintf("%s%08d", cfg.prefix, j))
		}
		return len(keys), putBatch(ctx, keys, value)
	}
}

// phase runs the clients, each writing the keys next hands it until it
// says stop, prints the phase's line, and returns its rate (keys written
// a second).
func phase(cfg config, write writeFunc, name string, next func(*rand.Rand) (int, bool)) (float64, error) {
	value := make([]byte, cfg.valueBytes)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	cpu0 := cpuSeconds(cfg.pids)
	peak := newPeakRSS(cfg.pids)
	snapshots := watchSnapshots(cfg.dataDirs)
	start := time.Now()
	latencies := make([][]time.Duration, cfg.clients)
	var failed, written atomic.Int64
	timeline := watchRate(&written)
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for c := range cfg.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			for {
				i, ok := next(rng)
				if !ok {
					return
				}
				ctx, cancel := context.WithTimeout(withClient(context.Background(), c), 10*time.Second)
				t := time.Now()
				n, err := write(ctx, i, value)
				cancel()
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				latencies[c] = append(latencies[c], time.Since(t))
				written.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	rates := timeline.stop()
	rss := peak.stop()
	snapshotsStarted := snapshots.stop()
	all := slices.Concat(latencies...)
	slices.Sort(all)
	if len(all) == 0 {
		return 0, fmt.Errorf("%s: no operation succeeded (%v)", name, firstErr.Load())
	}
	q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Microseconds()) / 1000 }
	rate := float64(written.Load()) / elapsed.Seconds()
	fmt.Printf("%-6s %-6s %9d %10.0f %9.1f %9.1f %9.1f %9.0f %9.1f\n", cfg.target, name, written.Load(),
		rate, q(0.5), q(0.99), q(1), rss, cpuSeconds(cfg.pids)-cpu0)
	if n := failed.Load(); n > 0 {
		fmt.Printf("# %s: %d operations failed, the first: %v\n", name, n, firstErr.Load())
	}
	if len(cfg.dataDirs) > 0 {
		counts := make([]int, len(snapshotsStarted))
		for i, starts := range snapshotsStarted {
			counts[i] = len(starts)
		}
		fmt.Printf("# %s: snapshots started per server (--data-dirs order): %v, seconds into the phase: %s\n", name, counts, startsText(snapshotsStarted))
	}
	fmt.Printf("# %s: writes/s in each %v: %s\n", name, timelineInterval, timelineText(rates))
	return rate, nil
}

// clientKey carries the number of the loadgen client a request is from,
// so that put and get pick that client's session.
type clientKey struct{}

func withClient(ctx context.Context, c int) context.Context {
	return context.WithValue(ctx, clientKey{}, c)
}

func clientOf(ctx context.Context) int {
	c, _ := ctx.Value(clientKey{}).(int)
	return c
}

// cpuSeconds returns the user and system CPU time of the processes.
func cpuSeconds(pids []int) float64 {
	var total float64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The fields after the command name, which is in parentheses.
		fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		if len(fields) > 12 {
			utime, _ := strconv.ParseFloat(fields[11], 64)
			stime, _ := strconv.ParseFloat(fields[12], 64)
			total += (utime + stime) / 100 // clock ticks (USER_HZ, 100 on Linux)
		}
	}
	return total
}

// peakRSS samples the processes' resident memory every 100 ms and keeps
// the highest of any one of them.
type peakRSS struct {
	stopCh chan struct{}
	done   chan float64
}

func newPeakRSS(pids []int) *peakRSS {
	p := &peakRSS{stopCh: make(chan struct{}), done: make(chan float64)}
	go func() {
		var peak float64
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, pid := range pids {
				peak = max(peak, rssMB(pid))
			}
			select {
			case <-p.stopCh:
				p.done <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *peakRSS) stop() float64 { close(p.stopCh); return <-p.done }

func rssMB(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

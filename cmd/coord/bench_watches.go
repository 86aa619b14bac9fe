package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"coord/server/localcluster"
)

func init() { registerBench(newBenchWatchesCmd) }

// watchesFlags configure coord bench watches.
type watchesFlags struct {
	watches      int
	nodes        int
	maxWatches   int
	maxConns     int
	after        []time.Duration
	serverBinary string
	jsonOut      bool
}

func newBenchWatchesCmd() *cobra.Command {
	var f watchesFlags
	cmd := &cobra.Command{
		Use:   "watches [--watches 10000] [--max-watches N]",
		Short: "Resident memory of a cluster node before, during and after a burst of long-poll watches",
		Long: `Start a local cluster of real coord server processes, then open --watches
long-poll watches of one key on the leader at once (each on its own
connection, as separate clients would), and report the leader's resident
memory (VmRSS):

  - before: the idle node;
  - during: once every watch has been answered 503 (beyond --http-max-watches)
    or is waiting, and the node's memory has stopped growing;
  - after: at each of --after once a write to the key has ended them all and
    the clients have closed their connections.

The nodes serve plain HTTP (--insecure), so that a build from before TLS
existed can be measured beside this one with the same requests.
--max-watches and --max-connections are passed to the nodes as
--http-max-watches and --http-max-connections (0: their defaults).
The process running this command holds one connection per watch: it needs a
file descriptor limit above --watches.`,
		Example: `  coord bench watches --watches 10000 --max-watches 10000 --max-connections 10100
  coord bench watches --watches 10000            # the default cap: most are refused`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.watches < 1 || f.nodes < 1 || f.nodes > 9 || f.maxWatches < 0 || f.maxConns < 0 {
				return usagef("want --watches >= 1, 1 <= --nodes <= 9, --max-watches and --max-connections >= 0")
			}
			return runWatchesBench(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.watches, "watches", 10000, "long-poll watches to open at once")
	fl.IntVar(&f.nodes, "nodes", 3, "number of nodes")
	fl.IntVar(&f.maxWatches, "max-watches", 0, "--http-max-watches of the nodes (0: their default)")
	fl.IntVar(&f.maxConns, "max-connections", 0, "--http-max-connections of the nodes (0: their default)")
	fl.DurationSliceVar(&f.after, "after", []time.Duration{time.Second, 5 * time.Second, 30 * time.Second}, "times after the watches end at which to read the memory")
	fl.BoolVar(&f.jsonOut, "json", false, "print the figures as JSON")
	fl.StringVar(&f.serverBinary, "server-binary", "", "coord binary to run the nodes with (default: this one), to compare builds")
	_ = fl.MarkHidden("server-binary")
	return cmd
}

// watchesResult is what coord bench watches measures; memory in bytes.
type watchesResult struct {
	Watches     int             `json:"watches"`
	Waiting     int             `json:"waiting"` // answered only by the write that ended them
	Refused     int             `json:"refused"` // answered 503 at once
	Failed      int             `json:"failed"`  // transport errors, other answers
	BeforeBytes int64           `json:"before_bytes"`
	DuringBytes int64           `json:"during_bytes"`
	After       []watchesSample `json:"after"`
}

type watchesSample struct {
	AfterSeconds float64 `json:"after_seconds"`
	Bytes        int64   `json:"bytes"`
}

func runWatchesBench(ctx context.Context, out io.Writer, f watchesFlags) error {
	dir, err := os.MkdirTemp("", "coord-bench-watches-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	binary := f.serverBinary
	if binary == "" {
		if binary, err = os.Executable(); err != nil {
			return err
		}
	}
	var args []string
	if f.maxWatches > 0 {
		args = append(args, "--http-max-watches", strconv.Itoa(f.maxWatches))
	}
	if f.maxConns > 0 {
		args = append(args, "--http-max-connections", strconv.Itoa(f.maxConns))
	}
	// Plain HTTP (--insecure), so that a build from before TLS existed can
	// be measured beside this one with the same requests.
	c, err := localcluster.Start(ctx, localcluster.Config{Nodes: f.nodes, Dir: dir, Binary: binary, Args: args, Insecure: true})
	if err != nil {
		return err
	}
	defer c.Close()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	leaderID, err := c.WaitLeader(wctx)
	cancel()
	if err != nil {
		return err
	}
	var leader localcluster.Node
	for _, n := range c.Nodes() {
		if n.ID == leaderID {
			leader = n
		}
	}
	res, err := measureWatches(ctx, leader, f)
	if err != nil {
		return err
	}
	if f.jsonOut {
		return json.NewEncoder(out).Encode(res)
	}
	limit := func(n int) string {
		if n == 0 {
			return "default"
		}
		return strconv.Itoa(n)
	}
	fmt.Fprintf(out, "%d watches on the leader of a %d-node cluster (--http-max-watches %s, --http-max-connections %s): %d waited, %d refused with 503, %d failed\n\n",
		res.Watches, f.nodes, limit(f.maxWatches), limit(f.maxConns), res.Waiting, res.Refused, res.Failed)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "leader RSS\tMB\t")
	fmt.Fprintf(tw, "before\t%.1f\t\n", mb(res.BeforeBytes))
	fmt.Fprintf(tw, "during\t%.1f\t\n", mb(res.DuringBytes))
	for _, s := range res.After {
		fmt.Fprintf(tw, "%gs after\t%.1f\t\n", s.AfterSeconds, mb(s.Bytes))
	}
	return tw.Flush()
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// measureWatches runs the burst against node and reads its memory.
func measureWatches(ctx context.Context, node localcluster.Node, f watchesFlags) (watchesResult, error) {
	res := watchesResult{Watches: f.watches}
	base := "http://" + node.HTTP
	// One connection per watch, closed after its answer, as separate
	// clients would.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, MaxIdleConnsPerHost: -1}}
	key := fmt.Sprintf("bench-watches-%d", time.Now().UnixNano())
	rev, err := putKey(ctx, client, base, key, "0")
	if err != nil {
		return res, err
	}
	if res.BeforeBytes, err = settledRSS(ctx, node.PID); err != nil {
		return res, err
	}

	var written sync.WaitGroup // every request sent
	var done sync.WaitGroup    // every answer read
	var waiting, refused, failed atomic.Int64
	written.Add(f.watches)
	done.Add(f.watches)
	sem := make(chan struct{}, 256) // connections being opened at once, so that the listen backlog does not overflow
	url := fmt.Sprintf("%s/v1/watch/kv/%s?revision=%d&timeout_ms=300000", base, key, rev)
	for range f.watches {
		sem <- struct{}{}
		go func() {
			defer done.Done()
			var once sync.Once
			sent := func() { once.Do(func() { <-sem; written.Done() }) }
			defer sent()
			trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { sent() }}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), "GET", url, nil)
			resp, err := client.Do(req)
			if err != nil {
				failed.Add(1)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				waiting.Add(1)
			case http.StatusServiceUnavailable:
				refused.Add(1)
			default:
				failed.Add(1)
			}
		}()
	}
	written.Wait()
	// Every watch not yet answered is waiting on the node, if it says so
	// (a build before coord_http_watches does not).
	if err := awaitWatches(ctx, client, base, func() int64 { return int64(f.watches) - refused.Load() - failed.Load() }); err != nil {
		return res, err
	}
	if res.DuringBytes, err = settledRSS(ctx, node.PID); err != nil {
		return res, err
	}
	if _, err := putKey(ctx, client, base, key, "1"); err != nil {
		return res, err
	}
	done.Wait()
	end := time.Now()
	res.Waiting, res.Refused, res.Failed = int(waiting.Load()), int(refused.Load()), int(failed.Load())
	for _, d := range f.after {
		select {
		case <-time.After(time.Until(end.Add(d))):
		case <-ctx.Done():
			return res, ctx.Err()
		}
		b, err := rss(node.PID)
		if err != nil {
			return res, err
		}
		res.After = append(res.After, watchesSample{AfterSeconds: d.Seconds(), Bytes: b})
	}
	return res, nil
}

// awaitWatches reads the node's coord_http_watches every 100 ms until it
// equals want() (at most 60 s), or returns at once if the node has no such
// metric.
func awaitWatches(ctx context.Context, client *http.Client, base string, want func() int64) error {
	for deadline := time.Now().Add(time.Minute); ; {
		n, ok, err := watchesGauge(ctx, client, base)
		if err != nil || !ok {
			return err
		}
		if n == want() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench watches: the node serves %d watches, want %d", n, want())
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// watchesGauge reads coord_http_watches from the node's /metrics.
func watchesGauge(ctx context.Context, client *http.Client, base string) (n int64, ok bool, err error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
	resp, err := client.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, found := strings.CutPrefix(sc.Text(), "coord_http_watches "); found {
			f, err := strconv.ParseFloat(v, 64)
			return int64(f), err == nil, err
		}
	}
	return 0, false, sc.Err()
}

// putKey writes value to key and returns the write's revision.
func putKey(ctx context.Context, client *http.Client, base, key, value string) (uint64, error) {
	req, _ := http.NewRequestWithContext(ctx, "PUT", base+"/v1/kv/"+key, strings.NewReader(value))
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Revision uint64 `json:"revision"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("bench watches: PUT %s: status %d, %v", key, resp.StatusCode, err)
	}
	return body.Revision, nil
}

// settledRSS reads pid's resident memory every 500 ms until two readings in
// a row differ by less than 1% (at most 60 s): the node has taken in what
// was sent to it.
func settledRSS(ctx context.Context, pid int) (int64, error) {
	last, err := rss(pid)
	if err != nil {
		return 0, err
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		now, err := rss(pid)
		if err != nil {
			return 0, err
		}
		if d := now - last; d*100 < now && -d*100 < now {
			return now, nil
		}
		last = now
	}
	return last, nil
}

// rss reads a process's resident memory (VmRSS) from /proc.
func rss(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("bench watches: no VmRSS in /proc/%d/status", pid)
}

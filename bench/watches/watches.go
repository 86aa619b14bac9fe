package watches

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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

	"coord/api"
	"coord/server/localcluster"
)

// ErrInvalid means a Config is not usable; the message names the field.
var ErrInvalid = errors.New("watches: invalid configuration")

// Config configures Run.
type Config struct {
	// Watches is the number of long-poll watches opened at once.
	Watches int
	// Nodes is the size of the cluster, in Dir, of processes of Binary.
	Nodes  int
	Dir    string
	Binary string
	// MaxWatches and MaxConnections are the nodes' --http-max-watches
	// and --http-max-connections; 0: their defaults.
	MaxWatches, MaxConnections int
	// After are the times after the watches end at which the memory is
	// read.
	After []time.Duration
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	switch {
	case c.Watches < 1:
		return fmt.Errorf("%w: watches %d: want at least 1", ErrInvalid, c.Watches)
	case c.Nodes < 1 || c.Nodes > 9:
		return fmt.Errorf("%w: nodes %d: want 1 to 9", ErrInvalid, c.Nodes)
	case c.MaxWatches < 0 || c.MaxConnections < 0:
		return fmt.Errorf("%w: max watches %d and max connections %d must not be negative", ErrInvalid, c.MaxWatches, c.MaxConnections)
	case c.Dir == "" || c.Binary == "":
		return fmt.Errorf("%w: Dir and Binary are required", ErrInvalid)
	}
	for _, d := range c.After {
		if d < 0 {
			return fmt.Errorf("%w: after %v is negative", ErrInvalid, d)
		}
	}
	return nil
}

// Result is what Run measures; memory in bytes.
type Result struct {
	Watches     int      `json:"watches"`
	Waiting     int      `json:"waiting"` // answered only by the write that ended them
	Refused     int      `json:"refused"` // answered 503 at once
	Failed      int      `json:"failed"`  // transport errors, other answers
	BeforeBytes int64    `json:"before_bytes"`
	DuringBytes int64    `json:"during_bytes"`
	After       []Sample `json:"after"`
}

// Sample is the memory some time after the watches ended.
type Sample struct {
	AfterSeconds float64 `json:"after_seconds"`
	Bytes        int64   `json:"bytes"`
}

// Run starts a cluster of cfg (plain HTTP, --insecure, so that a build
// from before TLS existed can be measured beside this one with the same
// requests), runs the burst against its leader and stops it.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	var args []string
	if cfg.MaxWatches > 0 {
		args = append(args, "--http-max-watches", strconv.Itoa(cfg.MaxWatches))
	}
	if cfg.MaxConnections > 0 {
		args = append(args, "--http-max-connections", strconv.Itoa(cfg.MaxConnections))
	}
	c, err := localcluster.Start(ctx, localcluster.Config{Nodes: cfg.Nodes, Dir: cfg.Dir, Binary: cfg.Binary, Args: args, Insecure: true})
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	leaderID, err := c.WaitLeader(wctx)
	cancel()
	if err != nil {
		return Result{}, err
	}
	var leader localcluster.Node
	for _, n := range c.Nodes() {
		if n.ID == leaderID {
			leader = n
		}
	}
	return measure(ctx, leader, cfg)
}

// WriteText prints the result as a table of the leader's memory.
func (res Result) WriteText(w io.Writer, cfg Config) error {
	limit := func(n int) string {
		if n == 0 {
			return "default"
		}
		return strconv.Itoa(n)
	}
	fmt.Fprintf(w, "%d watches on the leader of a %d-node cluster (--http-max-watches %s, --http-max-connections %s): %d waited, %d refused with 503, %d failed\n\n",
		res.Watches, cfg.Nodes, limit(cfg.MaxWatches), limit(cfg.MaxConnections), res.Waiting, res.Refused, res.Failed)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "leader RSS\tMB\t")
	fmt.Fprintf(tw, "before\t%.1f\t\n", mb(res.BeforeBytes))
	fmt.Fprintf(tw, "during\t%.1f\t\n", mb(res.DuringBytes))
	for _, s := range res.After {
		fmt.Fprintf(tw, "%gs after\t%.1f\t\n", s.AfterSeconds, mb(s.Bytes))
	}
	return tw.Flush()
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// measure runs the burst against node and reads its memory.
func measure(ctx context.Context, node localcluster.Node, cfg Config) (Result, error) {
	res := Result{Watches: cfg.Watches}
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
	written.Add(cfg.Watches)
	done.Add(cfg.Watches)
	sem := make(chan struct{}, 256) // connections being opened at once, so that the listen backlog does not overflow
	url := fmt.Sprintf("%s/v1/watch/kv/%s?%s=%d&%s=300000", base, key, api.ParamRevision, rev, api.ParamTimeoutMs)
	for range cfg.Watches {
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
	if err := awaitWatches(ctx, client, base, func() int64 { return int64(cfg.Watches) - refused.Load() - failed.Load() }); err != nil {
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
	for _, d := range cfg.After {
		select {
		case <-time.After(time.Until(end.Add(d))):
		case <-ctx.Done():
			return res, ctx.Err()
		}
		b, err := rss(node.PID)
		if err != nil {
			return res, err
		}
		res.After = append(res.After, Sample{AfterSeconds: d.Seconds(), Bytes: b})
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
	var body api.WriteResponse
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

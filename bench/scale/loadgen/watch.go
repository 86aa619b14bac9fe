package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"coord/apiwire"
	"coord/client"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// seen is one watcher's sighting of a revision of the watched key.
type seen struct {
	rev uint64
	at  time.Time
}

// watchTarget is what --mode watch needs of a system.
type watchTarget struct {
	// put writes a key and returns the revision it made; putWatched
	// writes the watched key (coord: in a session of its own).
	put, putWatched func(ctx context.Context, key string, value []byte) (uint64, error)
	// watch follows key from the endpoint numbered ep until ctx ends,
	// calling ready once it is established and onRev for every revision
	// it sees.
	watch func(ctx context.Context, ep int, key string, ready func(), onRev func(uint64)) error
	// leader returns the index in the endpoints of the leader, or -1.
	leader func(ctx context.Context) int
	// wire, if not nil, returns what the writes cost on the wire so far.
	wire func() wireCounts
	// warm, if not nil, readies the writers before the phase as a
	// long-running program's would be (coord: each client has written
	// once, so it knows the leader).
	warm func(ctx context.Context, key string, value []byte) error
}

// wireCounts is what a system's writers sent: HTTP attempts (a client
// retries an attempt that failed or timed out), the attempts that failed,
// and the connections they dialed; the connections the watchers dialed;
// and the connections each server accepted in all (its
// coord_http_connections_total, -1 where it has none).
type wireCounts struct {
	attempts, failed, dials int64
	watchDials              int64
	accepted                []int64
}

// countingTransport counts the attempts and dials of the coord clients.
type countingTransport struct {
	next                    http.RoundTripper
	attempts, failed, dials *atomic.Int64
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.attempts.Add(1)
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		t.failed.Add(1)
	}
	return resp, err
}

// runWatch measures watch latency (issue 21): --watchers watchers of one
// key, spread over the endpoints, a writer that puts that key every
// --watch-every, and a background writer putting random keys among --keys
// others at --rate a second, open loop (each write starts at its slot,
// whether the earlier ones have finished or not, up to --max-inflight at
// once). For every acknowledged write of the watched key, the latency from
// its acknowledgement to each watcher's sighting of it (negative when the
// watcher saw it before the writer had its answer; also from the write's
// send, as issue 21 first measured it); then the rate the
// background writer achieved and each server process's CPU in the phase,
// the leader's marked with *.
func runWatch(cfg config) error {
	if cfg.watchers <= 0 || cfg.rate < 0 || cfg.watchEvery <= 0 || cfg.duration <= 0 || cfg.keys <= 0 || cfg.maxInflight <= 0 {
		return errors.New("--mode watch needs positive --watchers, --watch-every, --duration, --keys and --max-inflight, and --rate >= 0")
	}
	if len(cfg.endpoints) == 0 || cfg.endpoints[0] == "" {
		return errors.New("--endpoints is required")
	}
	var t watchTarget
	switch cfg.target {
	case "coord":
		t = coordWatchTarget(cfg)
	case "etcd":
		var closeAll func()
		var err error
		t, closeAll, err = etcdWatchTarget(cfg)
		if err != nil {
			return err
		}
		defer closeAll()
	default:
		return fmt.Errorf("--target %q: want coord or etcd", cfg.target)
	}
	value := make([]byte, cfg.valueBytes)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	key := cfg.prefix + "watched"
	setup, cancelSetup := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelSetup()
	if _, err := t.putWatched(setup, key, value); err != nil {
		return fmt.Errorf("first put of %s: %w", key, err)
	}
	if t.warm != nil {
		if err := t.warm(setup, cfg.prefix+"warm", value); err != nil {
			return fmt.Errorf("warming the writers: %w", err)
		}
	}

	// The watchers, each with the revisions it saw.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sightings := make([][]seen, cfg.watchers)
	var readyWG, doneWG sync.WaitGroup
	var watchErrs atomic.Int64
	var firstWatchErr atomic.Value
	for w := range cfg.watchers {
		readyWG.Add(1)
		doneWG.Add(1)
		go func() {
			defer doneWG.Done()
			var once sync.Once
			ready := func() { once.Do(readyWG.Done) }
			defer ready() // a watcher that failed does not hold the start
			err := t.watch(ctx, w%len(cfg.endpoints), key, ready, func(rev uint64) {
				sightings[w] = append(sightings[w], seen{rev, time.Now()})
			})
			if err != nil && ctx.Err() == nil {
				watchErrs.Add(1)
				firstWatchErr.CompareAndSwap(nil, err)
			}
		}()
	}
	readyWG.Wait()
	if n := watchErrs.Load(); n > 0 {
		return fmt.Errorf("%d of %d watchers failed to start, the first: %v", n, cfg.watchers, firstWatchErr.Load())
	}
	fmt.Printf("# %s, %d watchers of one key over %d endpoints, watched key put every %v, background %d writes/s to %d other keys, for %v; %s\n",
		cfg.target, cfg.watchers, len(cfg.endpoints), cfg.watchEvery, cfg.rate, cfg.keys, cfg.duration, requestsText(cfg))

	cpu0 := make([]float64, len(cfg.pids))
	for i, pid := range cfg.pids {
		cpu0[i] = cpuSeconds([]int{pid})
	}
	// The load generator's own CPU: its watchers and writers compete with
	// the servers for the same cores.
	selfCPU0 := cpuSeconds([]int{os.Getpid()})
	var wire0 wireCounts
	if t.wire != nil {
		wire0 = t.wire()
	}
	start := time.Now()
	end := start.Add(cfg.duration)
	// The wire halfway through: the second half shows what the steady
	// load dials, without the first requests' ramp-up.
	var wireHalf atomic.Pointer[wireCounts]
	if t.wire != nil {
		halfway := time.AfterFunc(cfg.duration/2, func() {
			w := t.wire()
			wireHalf.Store(&w)
		})
		defer halfway.Stop()
	}

	// The background writer, open loop.
	var bgDone, bgFailed, bgSkipped atomic.Int64
	var firstPutErr atomic.Value
	var bgWG sync.WaitGroup
	if cfg.rate > 0 {
		bgWG.Add(1)
		go func() {
			defer bgWG.Done()
			sem := make(chan struct{}, cfg.maxInflight)
			rng := rand.New(rand.NewPCG(1, uint64(start.UnixNano())))
			interval := time.Second / time.Duration(cfg.rate)
			var ops sync.WaitGroup
			for slot := start; slot.Before(end); slot = slot.Add(interval) {
				if d := time.Until(slot); d > 0 {
					time.Sleep(d)
				}
				select {
				case sem <- struct{}{}:
				default:
					bgSkipped.Add(1)
					continue
				}
				k := fmt.Sprintf("%sbg/%08d", cfg.prefix, rng.IntN(cfg.keys))
				ops.Add(1)
				go func() {
					defer ops.Done()
					defer func() { <-sem }()
					c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if _, err := t.put(c, k, value); err != nil {
						bgFailed.Add(1)
						firstPutErr.CompareAndSwap(nil, err)
						return
					}
					bgDone.Add(1)
				}()
			}
			ops.Wait()
		}()
	}

	// The writer of the watched key: acknowledgement time by revision.
	acked := map[uint64]time.Time{}
	sent := map[uint64]time.Time{}
	var putLat []time.Duration
	var watchedFailed int
	tick := time.NewTicker(cfg.watchEvery)
	for now := range tick.C {
		if now.After(end) {
			break
		}
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t0 := time.Now()
		rev, err := t.putWatched(c, key, value)
		at := time.Now()
		cancel()
		if err != nil {
			watchedFailed++
			firstPutErr.CompareAndSwap(nil, err)
			continue
		}
		acked[rev] = at
		sent[rev] = t0
		putLat = append(putLat, at.Sub(t0))
	}
	tick.Stop()
	bgWG.Wait()
	elapsed := time.Since(start)
	cpus := make([]float64, len(cfg.pids))
	for i, pid := range cfg.pids {
		cpus[i] = 100 * (cpuSeconds([]int{pid}) - cpu0[i]) / elapsed.Seconds()
	}
	selfCPU := 100 * (cpuSeconds([]int{os.Getpid()}) - selfCPU0) / elapsed.Seconds()
	lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
	leader := t.leader(lctx)
	lcancel()
	// Give the watchers time to see the last write, then stop them.
	time.Sleep(2 * time.Second)
	stop()
	doneWG.Wait()

	lat, fromSend, missed, early := match(acked, sent, sightings)
	if len(lat) == 0 {
		return fmt.Errorf("no watcher saw any of the %d acknowledged writes of the watched key", len(acked))
	}
	slices.Sort(lat)
	slices.Sort(putLat)
	slices.Sort(fromSend)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	q := func(s []time.Duration, p float64) float64 { return ms(s[int(p*float64(len(s)-1))]) }
	var cpuText []string
	for i, c := range cpus {
		mark := ""
		if i == leader {
			mark = "*"
		}
		cpuText = append(cpuText, fmt.Sprintf("%.1f%%%s", c, mark))
	}
	fmt.Printf("%-6s watch: %d watched writes (%d failed), put p50 %.1f ms; seen %d times (%d missed, %d before the ack): from ack p50 %.1f ms, p99 %.1f ms, max %.1f ms; from send p50 %.1f ms, p99 %.1f ms\n",
		cfg.target, len(acked), watchedFailed, q(putLat, 0.5), len(lat), missed, early, q(lat, 0.5), q(lat, 0.99), q(lat, 1), q(fromSend, 0.5), q(fromSend, 0.99))
	fmt.Printf("%-6s background: %d writes (%.0f/s of %d/s), %d failed, %d not sent (%d in flight); cpu of each server (* leader): %s; of loadgen: %.1f%%\n",
		cfg.target, bgDone.Load(), float64(bgDone.Load())/elapsed.Seconds(), cfg.rate, bgFailed.Load(), bgSkipped.Load(), cfg.maxInflight, strings.Join(cpuText, " "), selfCPU)
	if t.wire != nil {
		w := t.wire()
		sent := bgDone.Load() + bgFailed.Load() + int64(len(acked)+watchedFailed)
		if cfg.wire {
			// The clients' own multiplexed transport counts no attempts
			// or dials (coordWatchTarget): only the servers' counts.
			fmt.Printf("# %s wire: %d writes; attempts and dials not counted over coord-wire/1; accepted by each server (* leader): %s\n",
				cfg.target, sent, acceptedText(wire0.accepted, w.accepted, leader))
			if h := wireHalf.Load(); h != nil {
				fmt.Printf("# %s wire, second half only: accepted by each server (* leader): %s\n", cfg.target, acceptedText(h.accepted, w.accepted, leader))
			}
		} else {
			fmt.Printf("# %s wire: %d attempts for %d writes (%.2f each), %d attempts failed, %d connections dialed by the writers, %d by the watchers; accepted by each server (* leader): %s\n",
				cfg.target, w.attempts-wire0.attempts, sent, float64(w.attempts-wire0.attempts)/float64(max(sent, 1)), w.failed-wire0.failed, w.dials-wire0.dials,
				w.watchDials-wire0.watchDials, acceptedText(wire0.accepted, w.accepted, leader))
			if h := wireHalf.Load(); h != nil {
				fmt.Printf("# %s wire, second half only: %d connections dialed by the writers, %d by the watchers; accepted by each server (* leader): %s\n",
					cfg.target, w.dials-h.dials, w.watchDials-h.watchDials, acceptedText(h.accepted, w.accepted, leader))
			}
		}
	}
	if err := firstPutErr.Load(); err != nil {
		fmt.Printf("# %s: the first failed write: %v\n", cfg.target, err)
	}
	return nil
}

// coordWatchTarget watches with coord's server-sent-event stream
// (GET /v1/watch/kv/{key}?stream=true, docs/API.md), one connection per
// watcher, and writes with the client package: the background writes
// round-robin over --clients Clients, each a session of its own (a session
// takes at most 1024 unacknowledged writes), the watched key's with one
// more.
func coordWatchTarget(cfg config) watchTarget {
	ccfg := client.DefaultConfig(cfg.requestEndpoints...)
	ccfg.Token, ccfg.Spread = cfg.token, cfg.spread
	if cfg.attemptTimeout > 0 {
		ccfg.AttemptTimeout = cfg.attemptTimeout
	}
	// Each client gets the transport the client package would make for
	// itself, counted.
	var attempts, failed, dials atomic.Int64
	var err error
	pool := make([]*client.Client, max(cfg.clients, 1)+1)
	for i := range pool {
		var dialer net.Dialer
		// The client package's own transport, its dials counted.
		ccfg.HTTP2 = cfg.http2
		tr := client.NewTransport(ccfg)
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		}
		ccfg.HTTPClient = &http.Client{Transport: countingTransport{next: tr, attempts: &attempts, failed: &failed, dials: &dials}}
		if cfg.wire {
			// The client's own multiplexed transport, one connection per
			// client and node: its attempts and dials are not counted.
			ccfg.HTTPClient, ccfg.HTTP2 = nil, false // wire: the client's default
		}
		if pool[i], err = client.New(ccfg); err != nil {
			break
		}
	}
	var next atomic.Uint64
	// A stream holds its connection for the whole run; the idle limit
	// keeps one per watcher should streams end and start again, so that
	// the harness does not close and dial what a user's program would
	// keep.
	var watchDials atomic.Int64
	var watchDialer net.Dialer
	watchTransport := &http.Transport{MaxIdleConns: cfg.watchers + 16, MaxIdleConnsPerHost: cfg.watchers + 16, IdleConnTimeout: 30 * time.Second,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			watchDials.Add(1)
			return watchDialer.DialContext(ctx, network, addr)
		}}
	if cfg.http2 {
		// The watchers share a few connections per node (up to the
		// server's 250 streams each) instead of one each.
		watchTransport.Protocols = client.HTTP2Protocols(false)
	}
	hc := &http.Client{Transport: watchTransport}
	if cfg.wire {
		// The watchers' streams share one multiplexed connection per node.
		hc = &http.Client{Transport: apiwire.NewTransport(apiwire.TransportConfig{})}
	}
	// The servers' counters are read over connections of their own (one
	// to each node, dialed by the first reading and so counted before the
	// phase), so that reading them does not add to what they count.
	metricsClient := &http.Client{Transport: &http.Transport{IdleConnTimeout: 5 * time.Minute}}
	base := make([]string, len(cfg.endpoints))
	for i, ep := range cfg.endpoints {
		if !strings.Contains(ep, "://") {
			ep = "http://" + ep
		}
		base[i] = strings.TrimSuffix(ep, "/")
	}
	return watchTarget{
		warm: func(ctx context.Context, key string, value []byte) error {
			for _, c := range pool[1:] {
				if err != nil {
					return err
				}
				if _, err := c.Put(ctx, key, value); err != nil {
					return err
				}
			}
			return nil
		},
		wire: func() wireCounts {
			accepted := make([]int64, len(base))
			for i, b := range base {
				accepted[i] = connectionsAccepted(metricsClient, b, cfg.token)
			}
			return wireCounts{attempts.Load(), failed.Load(), dials.Load(), watchDials.Load(), accepted}
		},
		put: func(ctx context.Context, key string, value []byte) (uint64, error) {
			if err != nil {
				return 0, err
			}
			return pool[1+int(next.Add(1)%uint64(len(pool)-1))].Put(ctx, key, value)
		},
		putWatched: func(ctx context.Context, key string, value []byte) (uint64, error) {
			if err != nil {
				return 0, err
			}
			return pool[0].Put(ctx, key, value)
		},
		watch: func(ctx context.Context, ep int, key string, ready func(), onRev func(uint64)) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base[ep]+"/v1/watch/kv/"+url.PathEscape(key)+"?stream=true", nil)
			if err != nil {
				return err
			}
			if cfg.token != "" {
				req.Header.Set("Authorization", "Bearer "+cfg.token)
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				return fmt.Errorf("watch %s: %s: %s", base[ep], resp.Status, strings.TrimSpace(string(b)))
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				data, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok {
					continue
				}
				var ev struct {
					Revision uint64 `json:"revision"`
				}
				if err := json.Unmarshal([]byte(data), &ev); err != nil {
					return fmt.Errorf("watch %s: event %q: %w", base[ep], data, err)
				}
				onRev(ev.Revision)
				ready() // the first event is the key as it is
			}
			if err := sc.Err(); err != nil {
				return err
			}
			return errors.New("watch stream ended")
		},
		leader: func(ctx context.Context) int {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base[0]+"/v1/status", nil)
			if err != nil {
				return -1
			}
			if cfg.token != "" {
				req.Header.Set("Authorization", "Bearer "+cfg.token)
			}
			resp, err := hc.Do(req)
			if err != nil {
				return -1
			}
			defer resp.Body.Close()
			var st struct {
				Leader  uint64 `json:"leader"`
				Members []struct {
					ID   uint64 `json:"id"`
					HTTP string `json:"http"`
				} `json:"members"`
			}
			if json.NewDecoder(resp.Body).Decode(&st) != nil {
				return -1
			}
			for _, m := range st.Members {
				if m.ID == st.Leader {
					for i, b := range base {
						if strings.HasSuffix(b, "//"+m.HTTP) {
							return i
						}
					}
				}
			}
			return -1
		},
	}
}

// etcdWatchTarget watches with clientv3 Watch: one client per endpoint,
// each watcher a Watch on its endpoint's client (etcd multiplexes the
// watches of one client over one gRPC stream, as an application would).
func etcdWatchTarget(cfg config) (watchTarget, func(), error) {
	all, err := clientv3.New(clientv3.Config{Endpoints: cfg.requestEndpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return watchTarget{}, nil, err
	}
	clients := []*clientv3.Client{all}
	per := make([]*clientv3.Client, len(cfg.endpoints))
	for i, ep := range cfg.endpoints {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
		if err != nil {
			for _, c := range clients {
				c.Close()
			}
			return watchTarget{}, nil, err
		}
		per[i] = c
		clients = append(clients, c)
	}
	closeAll := func() {
		for _, c := range clients {
			c.Close()
		}
	}
	put := func(ctx context.Context, key string, value []byte) (uint64, error) {
		r, err := all.Put(ctx, key, string(value))
		if err != nil {
			return 0, err
		}
		return uint64(r.Header.Revision), nil
	}
	return watchTarget{
		put:        put,
		putWatched: put,
		watch: func(ctx context.Context, ep int, key string, ready func(), onRev func(uint64)) error {
			for wr := range per[ep].Watch(ctx, key, clientv3.WithCreatedNotify()) {
				if err := wr.Err(); err != nil {
					return err
				}
				if wr.Created {
					ready()
				}
				for _, ev := range wr.Events {
					onRev(uint64(ev.Kv.ModRevision))
				}
			}
			return errors.New("watch channel closed")
		},
		leader: func(ctx context.Context) int {
			for i, ep := range cfg.endpoints {
				st, err := per[i].Status(ctx, ep)
				if err == nil && st.Header.MemberId == st.Leader {
					return i
				}
			}
			return -1
		},
	}, closeAll, nil
}

// match pairs every acknowledged write (acked: its acknowledgement time by
// revision; sent: its send time) with each watcher's first sighting of its
// revision, and returns the latencies from the acknowledgement and from the
// send, the pairs no sighting matched, and the sightings made before the
// acknowledgement.
func match(acked, sent map[uint64]time.Time, sightings [][]seen) (lat, fromSend []time.Duration, missed, early int) {
	for w := range sightings {
		got := map[uint64]time.Time{}
		for _, s := range sightings[w] {
			if _, ok := got[s.rev]; !ok {
				got[s.rev] = s.at
			}
		}
		for rev, at := range acked {
			s, ok := got[rev]
			if !ok {
				missed++
				continue
			}
			d := s.Sub(at)
			if d < 0 {
				early++
			}
			lat = append(lat, d)
			fromSend = append(fromSend, s.Sub(sent[rev]))
		}
	}
	return lat, fromSend, missed, early
}

// connectionsAccepted reads coord_http_connections_total from the node at
// base's /metrics, -1 if it cannot (a build without the metric).
func connectionsAccepted(hc *http.Client, base, token string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return -1
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "coord_http_connections_total "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return int64(f)
			}
		}
	}
	return -1
}

// acceptedText is the connections each server accepted between two
// readings, the leader's marked with *, "n/a" where a reading failed.
func acceptedText(before, after []int64, leader int) string {
	var parts []string
	for i := range after {
		mark := ""
		if i == leader {
			mark = "*"
		}
		if i >= len(before) || before[i] < 0 || after[i] < 0 {
			parts = append(parts, "n/a"+mark)
			continue
		}
		parts = append(parts, fmt.Sprintf("%d%s", after[i]-before[i], mark))
	}
	return strings.Join(parts, " ")
}

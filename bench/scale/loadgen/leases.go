package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"coord/client"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseOps acquires a lease and renews it; renew takes what acquire
// returned.
type leaseOps struct {
	acquire func(ctx context.Context, i int) (any, error)
	renew   func(ctx context.Context, i int, held any) error
}

// runLeases acquires --leases leases, then renews each every
// --renew-every, spread evenly over the period, from --clients clients,
// for --duration, and prints the renewals' latency and each server
// process's CPU in that phase (the followers' is what renewals that are
// Raft writes cost). The TTL is a minute, so that no lease expires while
// the others are still being acquired on a slow machine; renewals keep it.
func runLeases(cfg config) error {
	if cfg.leases <= 0 || cfg.renewEvery <= 0 || cfg.duration <= 0 || cfg.clients <= 0 {
		return errors.New("--mode leases needs positive --leases, --renew-every, --duration and --clients")
	}
	ttl := max(time.Minute, 3*cfg.renewEvery)
	var ops leaseOps
	switch cfg.target {
	case "coord":
		ccfg := client.DefaultConfig(cfg.requestEndpoints...)
		ccfg.Token, ccfg.Spread = cfg.token, cfg.spread
		ccfg.NoWire = true // HTTP/1.1, as before wire was the client's default (--wire is for the other modes)
		cl, err := client.New(ccfg)
		if err != nil {
			return err
		}
		ops.acquire = func(ctx context.Context, i int) (any, error) {
			l, err := cl.Acquire(ctx, fmt.Sprintf("%slease-%d", cfg.prefix, i), fmt.Sprintf("holder-%d", i), ttl)
			return l.Token, err
		}
		ops.renew = func(ctx context.Context, i int, held any) error {
			_, err := cl.Renew(ctx, fmt.Sprintf("%slease-%d", cfg.prefix, i), fmt.Sprintf("holder-%d", i), held.(uint64), 0)
			return err
		}
	case "etcd":
		cl, err := clientv3.New(clientv3.Config{Endpoints: cfg.requestEndpoints, DialTimeout: 5 * time.Second})
		if err != nil {
			return err
		}
		defer cl.Close()
		ops.acquire = func(ctx context.Context, i int) (any, error) {
			g, err := cl.Grant(ctx, int64(ttl.Seconds()))
			if err != nil {
				return nil, err
			}
			return g.ID, nil
		}
		ops.renew = func(ctx context.Context, i int, held any) error {
			_, err := cl.KeepAliveOnce(ctx, held.(clientv3.LeaseID))
			return err
		}
	default:
		return fmt.Errorf("--target %q: want coord or etcd", cfg.target)
	}
	held := make([]any, cfg.leases)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range cfg.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < cfg.leases; i = int(next.Add(1) - 1) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				h, err := ops.acquire(ctx, i)
				cancel()
				if err != nil {
					failed.Add(1)
					continue
				}
				held[i] = h
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d of %d leases not acquired", n, cfg.leases)
	}
	fmt.Printf("# %s, %d leases (ttl %v) renewed every %v by %d clients for %v, %s\n", cfg.target, cfg.leases, ttl, cfg.renewEvery, cfg.clients, cfg.duration, requestsText(cfg))
	cpu0 := make([]float64, len(cfg.pids))
	for i, pid := range cfg.pids {
		cpu0[i] = cpuSeconds([]int{pid})
	}
	// Each client owns every clients-th lease and renews each on its slot
	// of the period.
	latencies := make([][]time.Duration, cfg.clients)
	start := time.Now()
	end := start.Add(cfg.duration)
	failed.Store(0)
	for c := range cfg.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; ; round++ {
				for i := c; i < cfg.leases; i += cfg.clients {
					slot := start.Add(time.Duration(round)*cfg.renewEvery + time.Duration(i)*cfg.renewEvery/time.Duration(cfg.leases))
					if slot.After(end) {
						return
					}
					time.Sleep(time.Until(slot))
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					t := time.Now()
					err := ops.renew(ctx, i, held[i])
					cancel()
					if err != nil {
						failed.Add(1)
						continue
					}
					latencies[c] = append(latencies[c], time.Since(t))
				}
			}
		}()
	}
	wg.Wait()
	all := slices.Concat(latencies...)
	slices.Sort(all)
	if len(all) == 0 {
		return errors.New("no renewal succeeded")
	}
	q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Microseconds()) / 1000 }
	var cpus []string
	for i, pid := range cfg.pids {
		cpus = append(cpus, fmt.Sprintf("%.1f%%", 100*(cpuSeconds([]int{pid})-cpu0[i])/time.Since(start).Seconds()))
	}
	fmt.Printf("%-6s renewals %d (%.0f/s), failed %d, p50 %.1f ms, p99 %.1f ms, max %.1f ms; cpu of each server: %s\n",
		cfg.target, len(all), float64(len(all))/time.Since(start).Seconds(), failed.Load(), q(0.5), q(0.99), q(1), strings.Join(cpus, " "))
	return nil
}

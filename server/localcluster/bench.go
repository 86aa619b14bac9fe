package localcluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"coord/client"
)

// BenchRow is the write throughput and latency at one client concurrency.
type BenchRow struct {
	Concurrency int           `json:"concurrency"`
	Ops         int           `json:"ops"`
	Errors      int           `json:"errors"`
	Seconds     float64       `json:"seconds"`
	PerSecond   float64       `json:"per_second"`
	P50         time.Duration `json:"p50_ns"`
	P99         time.Duration `json:"p99_ns"`
}

// Bench measures committed writes: for each concurrency, that many
// clients (each with its own session) write 100-byte values to their own
// keys in a closed loop for d, through any node (requests to followers are
// forwarded). Every write is acknowledged only once a majority has it on
// disk (fsync).
func (c *Cluster) Bench(ctx context.Context, concurrencies []int, d time.Duration) ([]BenchRow, error) {
	var rows []BenchRow
	value := make([]byte, 100)
	for _, n := range concurrencies {
		if n < 1 {
			return nil, fmt.Errorf("%w: concurrency %d", ErrInvalid, n)
		}
		var mu sync.Mutex
		var lat []time.Duration
		errs := 0
		start := time.Now()
		end := start.Add(d)
		var wg sync.WaitGroup
		for w := range n {
			cl, err := client.New(c.ClientConfig())
			if err != nil {
				return nil, err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("bench/%d/%d", n, w)
				var mine []time.Duration
				bad := 0
				for time.Now().Before(end) && ctx.Err() == nil {
					octx, cancel := context.WithTimeout(ctx, 5*time.Second)
					t0 := time.Now()
					_, err := cl.Put(octx, key, value)
					cancel()
					if err != nil {
						bad++
						continue
					}
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, mine...)
				errs += bad
				mu.Unlock()
			}()
		}
		wg.Wait()
		secs := time.Since(start).Seconds()
		slices.Sort(lat)
		row := BenchRow{Concurrency: n, Ops: len(lat), Errors: errs, Seconds: secs, PerSecond: float64(len(lat)) / secs}
		if len(lat) > 0 {
			row.P50 = lat[len(lat)/2]
			row.P99 = lat[min(len(lat)-1, len(lat)*99/100)]
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// Failover is one leader kill: how long until the survivors agreed on a
// new leader, and how many terms the election took (more than one: a split
// vote).
type Failover struct {
	Took  time.Duration `json:"took_ns"`
	Terms uint64        `json:"terms"`
}

// Failovers kills the leader n times (SIGKILL), each time measuring how
// long until the other nodes agree on a new leader, then restarts the
// killed node and lets the cluster settle.
func (c *Cluster) Failovers(ctx context.Context, n int, settle time.Duration) ([]Failover, error) {
	var out []Failover
	for range n {
		f, err := c.failover(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, f)
		select {
		case <-time.After(settle):
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	return out, nil
}

// failover kills the leader, measures the time until the others agree on
// a new one, and restarts the killed node, all within a minute.
func (c *Cluster) failover(ctx context.Context) (Failover, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		return Failover{}, err
	}
	before, err := c.Status(ctx, leader)
	if err != nil {
		return Failover{}, err
	}
	t0 := time.Now()
	if err := c.Kill(leader); err != nil {
		return Failover{}, err
	}
	next, err := c.WaitLeader(ctx)
	if err != nil {
		return Failover{}, err
	}
	f := Failover{Took: time.Since(t0)}
	if st, err := c.Status(ctx, next); err == nil {
		f.Terms = st.Term - before.Term
	}
	return f, c.Restart(ctx, leader)
}

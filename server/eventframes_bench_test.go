package server

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkWatchStreamsOfOneKey puts one key watched by 300 event streams
// (the leader's share of the 1,000 watchers of issue 21's watch load),
// over real HTTP on loopback, and waits until every stream has its event:
// "shared" as the API serves them (the key's event read and encoded once
// per revision, eventFrames), "each" with every stream reading and
// encoding its own. It reports the process's CPU time per event delivered
// (the server's and the 300 readers' together).
//
//	go test ./server -run '^$' -bench WatchStreamsOfOneKey
func BenchmarkWatchStreamsOfOneKey(b *testing.B) {
	const streams = 300
	for _, mode := range []string{"shared", "each"} {
		b.Run(mode, func(b *testing.B) {
			f := newFake(1, 1)
			a := NewAPI(f, APIConfig{WatchesMax: 2 * streams})
			if mode == "each" {
				a.frames = nil
			}
			srv := httptest.NewServer(a)
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var seen atomic.Int64
			progress := make(chan struct{}, streams)
			var wg sync.WaitGroup
			for range streams {
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/watch/kv/watched?stream=true", nil)
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer resp.Body.Close()
					sc := bufio.NewScanner(resp.Body)
					for sc.Scan() {
						if strings.HasPrefix(sc.Text(), "data: ") {
							seen.Add(1)
							progress <- struct{}{}
						}
					}
				}()
			}
			put := func(i int) {
				if _, err := f.Propose(ctx, Command{Op: OpPut, Key: "watched", Value: fmt.Appendf(nil, "value %d", i)}); err != nil {
					b.Fatal(err)
				}
			}
			// The key's first put gives each stream one event: wait for
			// those, then count only the events of the measured puts.
			put(0)
			waitSeen(b, &seen, progress, streams)
			seen.Store(0)
			cpu0 := processCPU()
			b.ResetTimer()
			for i := range b.N {
				put(i + 1)
				waitSeen(b, &seen, progress, int64(streams*(i+1)))
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N*streams), "cpu-µs/event")
			cancel()
			srv.CloseClientConnections()
			wg.Wait()
		})
	}
}

// waitSeen waits until seen reaches want; each event signals progress.
func waitSeen(b *testing.B, seen *atomic.Int64, progress <-chan struct{}, want int64) {
	b.Helper()
	deadline := time.After(time.Minute)
	for seen.Load() < want {
		select {
		case <-progress:
		case <-deadline:
			b.Fatalf("%d events seen, want %d", seen.Load(), want)
		}
	}
}

package server

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coord/apiwire"
)

// writeCounting counts the writes to a server's end of a connection.
type writeCounting struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCounting) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// BenchmarkAPIPutWire is a PUT of a 256-byte value over coord's
// multiplexed connection (apiwire) on loopback, by 1, 16 and 64 clients
// writing back to back through one transport (one connection), with
// tokens, to the API over the in-memory fake replica: the wire's cost per
// request on the server (issue 21), beside BenchmarkAPIPutHTTP's. ns/op is
// the wall time per write over all clients; cpu-µs/op the process's CPU
// per write (server and clients: they share the process); srv-writes/op
// the server's write calls on the connection per answer.
//
//	go test ./server -run '^$' -bench 'APIPutWire' -benchmem
func BenchmarkAPIPutWire(b *testing.B) {
	for _, clients := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			a := benchAPI(b, true)
			hl, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			var writes atomic.Int64
			ws := apiwire.NewServer(a, apiwire.ServerConfig{Logger: slog.New(slog.DiscardHandler)})
			l := apiwire.NewListener(hl, apiwire.ListenerConfig{SortTimeout: 10 * time.Second}, func(c net.Conn) {
				ws.ServeConn(writeCounting{Conn: c, writes: &writes})
			})
			b.Cleanup(func() { l.Close() })
			tr := apiwire.NewTransport(apiwire.TransportConfig{})
			b.Cleanup(func() { tr.CloseIdleConnections() })
			hc := &http.Client{Transport: tr}
			url := "http://" + hl.Addr().String()
			value := bytes.Repeat([]byte("v"), 256)
			put := func(i int64) error {
				req, err := http.NewRequest("PUT", url+"/v1/kv/bench/"+strconv.FormatInt(i%1000, 10), bytes.NewReader(value))
				if err != nil {
					return err
				}
				req.Header.Set("Authorization", "Bearer "+benchSecret)
				resp, err := hc.Do(req)
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("status %d", resp.StatusCode)
				}
				return nil
			}
			if err := put(0); err != nil { // connect before the clock starts
				b.Fatal(err)
			}
			var next atomic.Int64
			var failed atomic.Value
			writes0, cpu0 := writes.Load(), cpuTime()
			b.ResetTimer()
			var wg sync.WaitGroup
			for range clients {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						if err := put(i); err != nil {
							failed.Store(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(writes.Load()-writes0)/float64(b.N), "srv-writes/op")
		})
	}
}

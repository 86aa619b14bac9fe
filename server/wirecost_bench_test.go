package server

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
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
			var writes0 int64
			var cpu0 time.Duration
			benchPuts(b, hc, url, clients, func() { writes0, cpu0 = writes.Load(), cpuTime() })
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(writes.Load()-writes0)/float64(b.N), "srv-writes/op")
		})
	}
}

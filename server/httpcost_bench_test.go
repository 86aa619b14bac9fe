package server

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The HTTP cost of a write on the leader (issues 15 and 21): the API's own
// handler, and the handler served over loopback by HTTP/1.1 and HTTP/2,
// in clear and over TLS. The replica is the in-memory fake, so that what
// is measured is the HTTP path, not replication.
//
//	go test ./server -run '^$' -bench 'APIPut' -benchmem
//	go test ./server -run '^$' -bench 'APIPutHandler' -benchmem -cpuprofile cpu.out

// benchSecret is the bearer token of the benchmarks with tokens on.
const benchSecret = "bench-token-0123456789abcdef0123456789abcdef"

// benchAPI returns an API over a leading fake replica, with metrics, and
// with tokens checked if auth (an admin token, benchSecret, installed).
func benchAPI(b *testing.B, auth bool) *API {
	b.Helper()
	f := newFake(1, 1)
	if auth {
		res, err := f.Propose(b.Context(), TokenBootstrapCommand(Token{Hash: HashToken(benchSecret), Role: TokenAdmin, Name: "bench"}))
		if err != nil || res.Status != StatusOK {
			b.Fatalf("install the token: %v %+v", err, res)
		}
	}
	return NewAPI(f, APIConfig{Metrics: NewMetrics(), Auth: auth, Logger: slog.New(slog.DiscardHandler)})
}

// discardWriter is a ResponseWriter that keeps only the status, for
// measuring the handler without a connection.
type discardWriter struct {
	header http.Header
	code   int
	n      int
}

func (d *discardWriter) Header() http.Header  { return d.header }
func (d *discardWriter) WriteHeader(code int) { d.code = code }
func (d *discardWriter) Write(p []byte) (int, error) {
	d.n += len(p)
	return len(p), nil
}

// BenchmarkAPIPutHandler is one PUT of a 256-byte value through the API's
// handler (routing, token check, body read, propose to the fake, JSON
// answer, metrics), with no connection: the handler's own cost and
// allocations per request. The handedOver cases serve it as Serve does,
// behind the hand-over's handler (handedOver, serving: no hand-over
// begun), to show what that costs every write.
func BenchmarkAPIPutHandler(b *testing.B) {
	for _, c := range []struct {
		name             string
		auth, handedOver bool
	}{
		{"auth=false", false, false},
		{"auth=true", true, false},
		{"auth=false,handedOver", false, true},
		{"auth=true,handedOver", true, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			a := benchAPI(b, c.auth)
			var h http.Handler = a
			if c.handedOver {
				h = newHandedOver(a, nil)
			}
			value := bytes.Repeat([]byte("v"), 256)
			base := httptest.NewRequest("PUT", "/v1/kv/bench/key", nil)
			base.Header.Set("Content-Type", "application/octet-stream")
			if c.auth {
				base.Header.Set("Authorization", "Bearer "+benchSecret)
			}
			w := &discardWriter{header: http.Header{}}
			body := bytes.NewReader(value)
			b.ReportAllocs()
			for b.Loop() {
				clear(w.header)
				w.code = 0
				body.Reset(value)
				r := base.Clone(base.Context())
				r.Body = io.NopCloser(body)
				h.ServeHTTP(w, r)
				if w.code != http.StatusOK {
					b.Fatalf("status %d", w.code)
				}
			}
		})
	}
}

// httpVariant is one way of serving the API: the protocol, and TLS or not.
type httpVariant struct {
	name  string
	tls   bool
	http2 bool
}

var httpVariants = []httpVariant{
	{"http1", false, false},
	{"h2c", false, true},
	{"https1", true, false},
	{"h2", true, true},
}

// startBenchServer serves a on loopback as v says, through newHTTPServer
// (the limits and connection hook of a real node), and returns its URL
// and a client for it that pools connections as coord/client does.
func startBenchServer(b *testing.B, a *API, v httpVariant) (string, *http.Client) {
	b.Helper()
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = newHTTPServer(a, DefaultHTTPLimits(), slog.New(slog.DiscardHandler), NewMetrics())
	var tr *http.Transport
	if v.tls {
		ts.EnableHTTP2 = v.http2
		ts.StartTLS()
		tr = ts.Client().Transport.(*http.Transport).Clone()
	} else {
		if v.http2 {
			ts.Config.Protocols = new(http.Protocols)
			ts.Config.Protocols.SetHTTP1(true)
			ts.Config.Protocols.SetUnencryptedHTTP2(true)
		}
		ts.Start()
		tr = &http.Transport{}
		if v.http2 {
			tr.Protocols = new(http.Protocols)
			tr.Protocols.SetUnencryptedHTTP2(true)
		}
	}
	b.Cleanup(ts.Close)
	tr.MaxIdleConnsPerHost, tr.IdleConnTimeout = 64, 30*time.Second
	return ts.URL, &http.Client{Transport: tr}
}

// BenchmarkAPIPutHTTP is a PUT of a 256-byte value over loopback, by 1,
// 16 and 64 clients writing back to back through one pooled client, for
// each way of serving (HTTP/1.1 and HTTP/2, clear and TLS), with tokens.
// ns/op is the wall time per write over all clients; cpu-µs/op the
// process's CPU per write (server and clients both: they share the
// process).
func BenchmarkAPIPutHTTP(b *testing.B) {
	for _, v := range httpVariants {
		for _, clients := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/clients=%d", v.name, clients), func(b *testing.B) {
				a := benchAPI(b, true)
				url, hc := startBenchServer(b, a, v)
				var cpu0 time.Duration
				benchPuts(b, hc, url, clients, func() { cpu0 = cpuTime() })
				// cpuTime: restore_bench_test.go.
				b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			})
		}
	}
}

// benchPuts makes b.N PUTs of 256-byte values to the keys bench/0 to
// bench/999 at url through hc, from clients goroutines at once, after one
// PUT that connects before the clock starts; started runs just before
// the timer is reset. It stops the timer after the last PUT and fails b
// if any PUT failed.
func benchPuts(b *testing.B, hc *http.Client, url string, clients int, started func()) {
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
	if err := put(0); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	var failed atomic.Value
	started()
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
}

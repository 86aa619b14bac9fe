package server

import (
	"net/http"
	"testing"
	"time"
)

// BenchmarkRouteObserver measures what counting one request costs a
// route's observer (Metrics.routeObserver): a 200 answer, whose counter
// and latency histogram are looked up once, on one goroutine and on many.
func BenchmarkRouteObserver(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		observe := NewMetrics().routeObserver("kv_put")
		b.ReportAllocs()
		for b.Loop() {
			observe(http.StatusOK, time.Millisecond)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		observe := NewMetrics().routeObserver("kv_put")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				observe(http.StatusOK, time.Millisecond)
			}
		})
	})
}

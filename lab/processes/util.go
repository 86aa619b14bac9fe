package processes

import (
	"fmt"
	"sort"
	"time"
)

func sortSlice[T any](xs []T, less func(i, j int) bool) { sort.SliceStable(xs, less) }

// sortedByMono returns the events ordered by their monotonic stamps.
func sortedByMono(events []event) []event {
	out := append([]event(nil), events...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].MonoNS < out[j].MonoNS })
	return out
}

// secs formats seconds for reading: "9.53 s", "0.012 s".
func secs(s float64) string {
	switch {
	case s >= 10:
		return fmt.Sprintf("%.1f s", s)
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	default:
		return fmt.Sprintf("%.3f s", s)
	}
}

func monoSeconds(ns int64) float64 { return float64(ns) / float64(time.Second) }

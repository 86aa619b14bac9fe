package lab

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// LoadAverage returns the machine's one-minute load average, or -1 where it
// cannot be read. Timing figures mean little without it on a shared machine.
func LoadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return -1
	}
	load, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return -1
	}
	return load
}

// Stats summarise a sample.
type Stats struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
}

// Summarize returns the statistics of values; the zero Stats for none.
func Summarize(values []float64) Stats {
	if len(values) == 0 {
		return Stats{}
	}
	s := slices.Clone(values)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	median := s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stats{N: len(s), Min: s[0], Median: median, Max: s[len(s)-1], Mean: sum / float64(len(s))}
}

// Seconds converts durations to seconds, for charts and Summarize.
func Seconds(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

// Floats converts integers to float64, for charts and Summarize.
func Floats[T ~int | ~int64 | ~uint64](xs []T) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

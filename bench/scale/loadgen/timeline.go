package main

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// rateTimeline samples a phase's count of written keys every
// timelineInterval, so that a phase's rate comes with its slow periods: a
// rate over 30 s can hide a stall of seconds, and a snapshot's cost shows
// in the windows it falls in (issue 21, `steady2`).
type rateTimeline struct {
	stopCh chan struct{}
	done   chan []float64
}

// timelineInterval is the length of one window of the timeline.
const timelineInterval = 5 * time.Second

// watchRate starts sampling written, a phase's counter of written keys.
func watchRate(written *atomic.Int64) *rateTimeline {
	t := &rateTimeline{stopCh: make(chan struct{}), done: make(chan []float64, 1)}
	go func() {
		tick := time.NewTicker(timelineInterval)
		defer tick.Stop()
		var rates []float64
		last, lastAt := int64(0), time.Now()
		sample := func() {
			n, now := written.Load(), time.Now()
			rates = append(rates, float64(n-last)/now.Sub(lastAt).Seconds())
			last, lastAt = n, now
		}
		for {
			select {
			case <-t.stopCh:
				if time.Since(lastAt) >= timelineInterval/5 { // a last window of at least 1 s
					sample()
				}
				t.done <- rates
				return
			case <-tick.C:
				sample()
			}
		}
	}()
	return t
}

// stop ends the sampling and returns the rate of each window, in order
// (the last one may be shorter than timelineInterval).
func (t *rateTimeline) stop() []float64 { close(t.stopCh); return <-t.done }

// timelineText formats rates as "4012 3980 ... (slowest 2100, median 3990)".
func timelineText(rates []float64) string {
	if len(rates) == 0 {
		return "none"
	}
	parts := make([]string, len(rates))
	for i, r := range rates {
		parts[i] = fmt.Sprintf("%.0f", r)
	}
	return fmt.Sprintf("%s (slowest %.0f, median %.0f)", strings.Join(parts, " "), slices.Min(rates), median(rates))
}

// median returns the median of xs (the mean of the middle two for an even
// count); xs is not changed. It must not be empty.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// startsText formats each server's snapshot starts as seconds into the
// phase: "[12.3] [] [25.0 29.1]".
func startsText(started [][]time.Duration) string {
	parts := make([]string, len(started))
	for i, starts := range started {
		secs := make([]string, len(starts))
		for j, d := range starts {
			secs[j] = fmt.Sprintf("%.1f", d.Seconds())
		}
		parts[i] = "[" + strings.Join(secs, " ") + "]"
	}
	return strings.Join(parts, " ")
}

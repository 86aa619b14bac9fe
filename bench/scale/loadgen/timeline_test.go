package main

import (
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), c.xs...)
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", in, got, c.want)
		}
		for i := range in {
			if in[i] != c.xs[i] {
				t.Fatalf("median changed its input: %v, was %v", c.xs, in)
			}
		}
	}
}

func TestTimelineText(t *testing.T) {
	if got, want := timelineText([]float64{4000, 1200.4, 3999.6}), "4000 1200 4000 (slowest 1200, median 4000)"; got != want {
		t.Errorf("timelineText = %q, want %q", got, want)
	}
	if got := timelineText(nil); got != "none" {
		t.Errorf("timelineText(nil) = %q, want none", got)
	}
	if got, want := startsText([][]time.Duration{{12340 * time.Millisecond}, nil, {time.Second, 29 * time.Second}}), "[12.3] [] [1.0 29.0]"; got != want {
		t.Errorf("startsText = %q, want %q", got, want)
	}
}

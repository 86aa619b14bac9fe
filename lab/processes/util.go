//go:build linux

package processes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"coord/lease"
)

// sortedByMono returns the events ordered by their monotonic stamps.
func sortedByMono(events []event) []event {
	out := slices.Clone(events)
	slices.SortStableFunc(out, func(a, b event) int { return cmp.Compare(a.MonoNS, b.MonoNS) })
	return out
}

// isElected says the event is a participant's election.
func isElected(e event) bool { return e.Event.Event == lease.EventElected }

// sleep waits for d, or until ctx is done: the time the participants are
// given to show what they do, when no event marks its end.
func sleep(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}

// bothSides runs a trial's two sides at the same time, the articles' in
// dir/articles and coord's in dir/coord, and returns their errors.
func bothSides(dir string, articles, coord func(dir string) error) error {
	var articlesErr, coordErr error
	var wg sync.WaitGroup
	wg.Go(func() { articlesErr = articles(filepath.Join(dir, implArticles)) })
	wg.Go(func() { coordErr = coord(filepath.Join(dir, implCoord)) })
	wg.Wait()
	return errors.Join(articlesErr, coordErr)
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

// shortSeconds formats a time in seconds for a summary cell: "8.9 s",
// "14 ms", "3.2 ms".
func shortSeconds(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.1f s", s)
	case s >= 0.01:
		return fmt.Sprintf("%.0f ms", s*1000)
	default:
		return fmt.Sprintf("%.1f ms", s*1000)
	}
}

func monoSeconds(ns int64) float64 { return float64(ns) / float64(time.Second) }

// timeline describes events and exits in monotonic order, in milliseconds
// from origin: "+5.123 ms p2 elected token 4".
func timeline(events []event, exits map[string]int64, origin int64) []string {
	type line struct {
		at   int64
		text string
	}
	var lines []line
	for _, e := range sortedByMono(events) {
		text := e.Member + " " + e.Event.Event
		if e.Token != 0 {
			text += " token " + strconv.FormatUint(e.Token, 10)
		}
		if e.Error != "" {
			text += " (" + e.Error + ")"
		}
		lines = append(lines, line{e.MonoNS, text})
	}
	for m, at := range exits {
		lines = append(lines, line{at, m + " died"})
	}
	slices.SortStableFunc(lines, func(a, b line) int { return cmp.Compare(a.at, b.at) })
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = fmt.Sprintf("%+.3f ms %s", float64(l.at-origin)/1e6, l.text)
	}
	return out
}

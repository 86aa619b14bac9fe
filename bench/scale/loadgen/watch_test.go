package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMatch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	sent := map[uint64]time.Time{10: t0, 20: t0.Add(100 * ms)}
	acked := map[uint64]time.Time{10: t0.Add(5 * ms), 20: t0.Add(105 * ms)}
	sightings := [][]seen{
		// Saw both, 10 twice (only the first counts), and a revision
		// nobody acknowledged (the first put's, before the phase).
		{{5, t0}, {10, t0.Add(7 * ms)}, {10, t0.Add(50 * ms)}, {20, t0.Add(104 * ms)}},
		// Skipped 10.
		{{20, t0.Add(120 * ms)}},
	}
	lat, fromSend, missed, early := match(acked, sent, sightings)
	slices.Sort(lat)
	slices.Sort(fromSend)
	if want := []time.Duration{-1 * ms, 2 * ms, 15 * ms}; !slices.Equal(lat, want) {
		t.Errorf("latencies from ack %v, want %v", lat, want)
	}
	if want := []time.Duration{4 * ms, 7 * ms, 20 * ms}; !slices.Equal(fromSend, want) {
		t.Errorf("latencies from send %v, want %v", fromSend, want)
	}
	if missed != 1 || early != 1 {
		t.Errorf("missed %d, early %d; want 1, 1", missed, early)
	}
}

func TestRunWatchRejectsBadFlags(t *testing.T) {
	good := config{target: "coord", endpoints: []string{"127.0.0.1:1"}, keys: 10, valueBytes: 8, clients: 1,
		duration: time.Second, watchers: 1, watchEvery: 100 * time.Millisecond, rate: 10, maxInflight: 1}
	for name, mutate := range map[string]func(*config){
		"no watchers":    func(c *config) { c.watchers = 0 },
		"no period":      func(c *config) { c.watchEvery = 0 },
		"negative rate":  func(c *config) { c.rate = -1 },
		"no duration":    func(c *config) { c.duration = 0 },
		"no keys":        func(c *config) { c.keys = 0 },
		"no in-flight":   func(c *config) { c.maxInflight = 0 },
		"no endpoints":   func(c *config) { c.endpoints = []string{""} },
		"unknown target": func(c *config) { c.target = "zookeeper" },
	} {
		cfg := good
		mutate(&cfg)
		err := runWatch(cfg)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if name == "unknown target" && !strings.Contains(err.Error(), "zookeeper") {
			t.Errorf("%s: %v does not name the target", name, err)
		}
	}
}

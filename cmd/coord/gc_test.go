package main

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestServerGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 100},
		{20 * mib, 100},  // 10,000 keys
		{64 * mib, 100},  // the headroom: still Go's default
		{96 * mib, 66},   // 64 MiB of room
		{128 * mib, 50},  // twice the headroom
		{200 * mib, 32},  // 500,000 keys: still 64 MiB of room
		{256 * mib, 25},  // four times the headroom
		{1 << 40, 25},    // never below the floor
		{64*mib + 1, 99}, // continuous at the bend
		{254 * mib, 25},  // rounds down towards the floor
	} {
		if got := serverGCPercentFor(c.live); got != c.want {
			t.Errorf("serverGCPercentFor(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
	}
	// The goal leaves at least a quarter of the live heap of room, and
	// about min(live, headroom) of it (the percentage is rounded down: 1%
	// short).
	for live := uint64(mib); live < 1024*mib; live += mib / 2 {
		room := live * uint64(serverGCPercentFor(live)) / 100
		if room < live/4 || room+live/100 < min(live, serverGCHeadroomBytes) {
			t.Fatalf("%d bytes live: %d bytes of room", live, room)
		}
	}
}

// TestServerGCTunerFollowsTheLiveHeap runs the tuner on this test's own
// heap: Go's default while it is small, 64 MiB of room with 140 MiB live,
// the default again once that is garbage.
func TestServerGCTunerFollowsTheLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	debug.SetGCPercent(50) // as the old fixed rule would have left it
	tuner, p := startServerGC()
	if tuner == nil {
		t.Fatal("without GOGC: no tuner")
	}
	defer tuner.stop()
	if p != 100 {
		t.Fatalf("with a small heap: percentage %d, want 100", p)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("with a small heap the runtime's percentage is %d, want 100", got)
	}

	big := make([]byte, 140<<20)
	collect(t, tuner)
	// The test's own heap adds a few MiB to big: 64 MiB of room is 42-45%.
	got := tuner.Percent()
	if got < serverGCPercentFor(150<<20) || got > serverGCPercentFor(140<<20) {
		t.Fatalf("with 140 MiB live: percentage %d, want %d-%d", got, serverGCPercentFor(150<<20), serverGCPercentFor(140<<20))
	}
	if rt := debug.SetGCPercent(got); rt != got {
		t.Fatalf("with 140 MiB live the runtime's percentage is %d, want %d", rt, got)
	}
	runtime.KeepAlive(big)
	big = nil
	collect(t, tuner) // marks the heap without big
	if got := tuner.Percent(); got != serverGCPercentMax {
		t.Fatalf("with big collected: percentage %d, want %d", got, serverGCPercentMax)
	}
}

// collect runs a collection and waits for the tuner's answer to it (a
// cleanup of an earlier cycle may answer first: collect until the
// percentage has been set from a cycle that began after the call).
func collect(t *testing.T, tuner *gcTuner) {
	t.Helper()
	for range 2 { // the sentinel armed before this cycle, then one armed in it
		runtime.GC()
		select {
		case <-tuner.tuned:
		case <-time.After(time.Minute):
			t.Fatal("the tuner did not run after a collection")
		}
	}
}

func TestServerGCLeavesTheOperatorsGOGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	// GOGC is the operator's: it stands, whatever the runtime was set to.
	t.Setenv("GOGC", "80")
	debug.SetGCPercent(80) // as the runtime would have parsed it at start
	tuner, p := startServerGC()
	if tuner != nil || p != 80 {
		t.Fatalf("with GOGC=80: startServerGC() = %v, %d, want no tuner, 80", tuner, p)
	}
	if got := debug.SetGCPercent(100); got != 80 {
		t.Fatalf("with GOGC=80 the runtime's percentage is %d, want 80", got)
	}
}

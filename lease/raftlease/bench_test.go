package raftlease

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"coord/lease"
	"coord/lease/eventlog"
	"coord/lease/leasetest"
)

// BenchmarkHolderKill measures, on real processes, the time from SIGKILL
// of a `coord elect` holder to the next holder's election, with a raft://
// session and without (the TTL), side by side on one cluster: each
// iteration kills one holder of each, alternating which goes first. The
// TTL is coord elect's default, 9 s. It reports the medians and their
// ratio; docs/BENCHMARKS.md ("raft:// lease holder killed") quotes them.
//
//	go test ./lease/raftlease -run '^$' -bench HolderKill -benchtime 20x
func BenchmarkHolderKill(b *testing.B) {
	c := startCluster(b)
	const ttl = 9 * time.Second
	modes := []struct {
		name string
		url  string
	}{
		{"session", sessionURL(c, c.Endpoints())},
		{"ttl", storeURL(c)},
	}
	type run struct {
		g      *leasetest.Group
		next   int
		gaps   []time.Duration
		leader lease.Event
	}
	runs := make([]*run, len(modes))
	timeout := 10*ttl + 20*time.Second
	for i, m := range modes {
		g := leasetest.StartGroup(b, coordBin, m.url, leasetest.NewName(), 2, "--ttl", ttl.String())
		r := &run{g: g, next: 3}
		r.leader = g.WaitEvent(b, timeout, m.name+": a first leader", func(e lease.Event) bool { return e.Event == lease.EventElected })
		// The other participant waits as a candidate before the first kill.
		g.WaitEvent(b, timeout, m.name+": a candidate", func(e lease.Event) bool {
			return e.Event == lease.EventLeader && e.ID != r.leader.ID
		})
		runs[i] = r
	}
	kill := func(m string, r *run) {
		killed := r.leader
		at := eventlog.MonotonicNow()
		r.g.Signal(b, killed.ID, syscall.SIGKILL)
		next := r.g.WaitEvent(b, timeout, m+": a new leader", func(e lease.Event) bool {
			return e.Event == lease.EventElected && e.Token > killed.Token
		})
		r.gaps = append(r.gaps, time.Duration(next.MonoNS-at))
		r.leader = next
		// A new participant in the killed one's place, waiting as a
		// candidate before the next kill.
		id := fmt.Sprintf("p%d", r.next)
		r.next++
		r.g.Add(b, id)
		r.g.WaitEvent(b, timeout, m+": the new candidate", func(e lease.Event) bool {
			return e.Event == lease.EventLeader && e.ID == id
		})
	}
	b.ResetTimer()
	for i := range b.N {
		for j := range modes {
			k := (i + j) % len(modes)
			kill(modes[k].name, runs[k])
		}
	}
	b.StopTimer()
	medians := make([]time.Duration, len(modes))
	for i, m := range modes {
		gaps := slices.Clone(runs[i].gaps)
		slices.Sort(gaps)
		medians[i] = gaps[len(gaps)/2]
		b.ReportMetric(float64(medians[i].Milliseconds()), m.name+"-median-ms")
		b.ReportMetric(float64(gaps[len(gaps)-1].Milliseconds()), m.name+"-max-ms")
		b.Logf("%s: %d kills, median %v, min %v, max %v", m.name, len(gaps), medians[i].Round(time.Millisecond),
			gaps[0].Round(time.Millisecond), gaps[len(gaps)-1].Round(time.Millisecond))
	}
	b.ReportMetric(float64(medians[1])/float64(medians[0]), "ttl/session")
}

package server

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"coord/api"
	"coord/raft"
)

// heldMachine is a state machine holding n leases with names in random
// order, and m more that were released.
func heldMachine(tb testing.TB, n, m int) *stateMachine {
	tb.Helper()
	// The leader's state machine: only the leader shows time left.
	s := &stateMachine{machine: NewMachine(DefaultLimits()), lessor: newLessor(time.Second), changed: make(chan struct{}), leading: true}
	rng := rand.New(rand.NewPCG(1, 2))
	index := uint64(0)
	for i := range n + m {
		index++
		name := fmt.Sprintf("lease-%08d", rng.Uint32())
		r := s.Apply(index, Command{Op: OpAcquire, Key: name, Holder: "h", TTL: time.Minute}.Marshal()).(Result)
		if i >= n && r.Status == StatusOK {
			index++
			s.Apply(index, Command{Op: OpRelease, Key: name, Holder: "h", Token: r.Token}.Marshal())
		}
	}
	return s
}

// The dashboard lists the first leases by name, as a full sort would, and
// counts them all.
func TestDashboardLeasesAreTheFirstByName(t *testing.T) {
	for _, n := range []int{0, 5, dashboardLeasesMax, 3 * dashboardLeasesMax} {
		s := heldMachine(t, n, 50)
		now := time.Now()
		got, total := s.dashboardLeases(now)
		want, wantTotal := leasesBySortingAll(s, now)
		if total != wantTotal || len(got) != min(wantTotal, dashboardLeasesMax) || len(got) != len(want) {
			t.Fatalf("%d held: listed %d of %d", wantTotal, len(got), total)
		}
		for i, l := range got {
			if l.Name != want[i].Name || l.Token != want[i].Token || l.RemainingMs == nil {
				t.Fatalf("%d held: lease %d is %+v, want %+v", wantTotal, i, l, want[i])
			}
		}
		if n == 0 {
			continue
		}
		// The first is released: the list, cached until then, moves on.
		first := got[0]
		s.Apply(s.machine.Applied()+1, Command{Op: OpRelease, Key: first.Name, Holder: first.Holder, Token: first.Token}.Marshal())
		again, total := s.dashboardLeases(now)
		if total != wantTotal-1 || (len(again) > 0 && again[0].Name == first.Name) {
			t.Fatalf("after releasing %s: %d held, first %+v", first.Name, total, again)
		}
	}
}

// leasesBySortingAll is the first way the dashboard listed leases, kept to
// measure against: copy every held lease record, sort them all, keep 200.
func leasesBySortingAll(s *stateMachine, now time.Time) ([]api.DashboardLease, int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	held := s.machine.HeldLeases()
	slices.SortFunc(held, func(a, b Lease) int { return strings.Compare(a.Name, b.Name) })
	var out []api.DashboardLease
	for _, l := range held[:min(len(held), dashboardLeasesMax)] {
		dl := api.DashboardLease{Name: l.Name, Holder: l.Holder, Token: l.Token, TTLMs: l.TTL.Milliseconds(), Revision: l.Revision}
		if left, ok := s.lessor.remaining(l.Name, now); ok {
			ms := left.Milliseconds()
			dl.RemainingMs = &ms
		}
		out = append(out, dl)
	}
	return out, len(held)
}

// BenchmarkDashboardLeases is the cost, under the state machine's read
// lock, of the lease list each dashboard document carries (one per open
// page, every 500 ms): unchanged=no lease taken or freed since the last
// document (the names are cached), walk=some were (the names are walked
// again), sort-all=copying and sorting every record (what it did first).
func BenchmarkDashboardLeases(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		s := heldMachine(b, n, 0)
		now := time.Now()
		b.Run(fmt.Sprintf("held=%d/unchanged", n), func(b *testing.B) {
			for range b.N {
				s.dashboardLeases(now)
			}
		})
		b.Run(fmt.Sprintf("held=%d/walk", n), func(b *testing.B) {
			for range b.N {
				s.heldChanges.Add(1) // as if a lease was taken or freed since
				s.dashboardLeases(now)
			}
		})
		b.Run(fmt.Sprintf("held=%d/sort-all", n), func(b *testing.B) {
			for range b.N {
				leasesBySortingAll(s, now)
			}
		})
	}
}

// BenchmarkObserverDelivered is what noting a peer's message costs the
// transport's reader, per message.
func BenchmarkObserverDelivered(b *testing.B) {
	o := newObserver(1)
	now := time.Now()
	for _, c := range []struct {
		name string
		m    raft.Message
	}{
		{"append-response", raft.Message{Type: raft.MsgAppendResponse, From: 2, Term: 3}},
		{"heartbeat", raft.Message{Type: raft.MsgHeartbeatRequest, From: 2, Term: 3, Commit: 10}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				o.delivered(c.m, now)
			}
		})
	}
}

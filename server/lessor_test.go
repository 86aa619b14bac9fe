package server

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestLessorExpiresAfterTTLAndRetries(t *testing.T) {
	l := newLessor(time.Second)
	t0 := time.Unix(1000, 0)
	lease := Lease{Name: "L", Holder: "a", Token: 5, Renewed: 5, TTL: 3 * time.Second}
	l.observe(lease, t0)
	if cmds := l.expired(t0.Add(3*time.Second - 1)); len(cmds) != 0 {
		t.Fatalf("expired early: %+v", cmds)
	}
	cmds := l.expired(t0.Add(3 * time.Second))
	if len(cmds) != 1 || cmds[0].Op != OpExpire || cmds[0].Token != 5 || cmds[0].Renewed != 5 {
		t.Fatalf("expired: %+v", cmds)
	}
	if again := l.expired(t0.Add(3*time.Second + time.Second/2)); len(again) != 0 {
		t.Fatalf("proposed again within the retry interval: %+v", again)
	}
	if again := l.expired(t0.Add(4 * time.Second)); len(again) != 1 {
		t.Fatalf("not proposed again after the retry interval: %+v", again)
	}
	lease.Holder = ""
	l.observe(lease, t0.Add(5*time.Second))
	if _, ok := l.remaining("L", t0.Add(5*time.Second)); ok {
		t.Fatal("a released lease still has a deadline")
	}
}

func TestLessorRenewRestartsAndPromoteExtends(t *testing.T) {
	l := newLessor(time.Second)
	t0 := time.Unix(1000, 0)
	lease := Lease{Name: "L", Holder: "a", Token: 5, Renewed: 5, TTL: 3 * time.Second}
	l.observe(lease, t0)
	lease.Renewed = 9
	l.observe(lease, t0.Add(2*time.Second))
	if left, _ := l.remaining("L", t0.Add(2*time.Second)); left != 3*time.Second {
		t.Fatalf("renew left %v, want 3s", left)
	}
	// The same tenure and renewal seen again (a replay) changes nothing.
	l.observe(lease, t0.Add(4*time.Second))
	if left, _ := l.remaining("L", t0.Add(4*time.Second)); left != time.Second {
		t.Fatalf("replayed observe moved the deadline: left %v", left)
	}
	// A new leader gives every held lease its full TTL from its own now:
	// never shorter than the old leader's deadline.
	l.promote([]Lease{lease}, t0.Add(4*time.Second))
	if left, _ := l.remaining("L", t0.Add(4*time.Second)); left != 3*time.Second {
		t.Fatalf("after promote left %v, want 3s", left)
	}
}

func TestLessorRetriesAFailedProposalAtOnce(t *testing.T) {
	l := newLessor(time.Hour)
	t0 := time.Unix(1000, 0)
	l.observe(Lease{Name: "L", Holder: "a", Token: 1, Renewed: 1, TTL: time.Second}, t0)
	if len(l.expired(t0.Add(time.Second))) != 1 {
		t.Fatal("not expired at its deadline")
	}
	if len(l.expired(t0.Add(2*time.Second))) != 0 {
		t.Fatal("proposed again within the retry interval")
	}
	l.retrySoon("L")
	if len(l.expired(t0.Add(2*time.Second))) != 1 {
		t.Fatal("a failed proposal was not retried at the next check")
	}
}

func TestLessorExtendsOnlyALiveDeadlineOfTheSameTenure(t *testing.T) {
	l := newLessor(time.Second)
	t0 := time.Unix(1000, 0)
	lease := Lease{Name: "L", Holder: "a", Token: 5, Renewed: 5, TTL: 3 * time.Second}
	l.observe(lease, t0)
	if !l.extend(lease, t0.Add(2*time.Second)) {
		t.Fatal("a live deadline was not extended")
	}
	if left, _ := l.remaining("L", t0.Add(2*time.Second)); left != 3*time.Second {
		t.Fatalf("extended to %v from now, want the full TTL", left)
	}
	if len(l.expired(t0.Add(4*time.Second))) != 0 {
		t.Fatal("expired before the extended deadline")
	}
	other := lease
	other.Token = 9
	if l.extend(other, t0.Add(3*time.Second)) {
		t.Fatal("extended under another tenure's token")
	}
	if l.extend(lease, t0.Add(5*time.Second)) {
		t.Fatal("extended a deadline that had passed: the renewal must go through the log")
	}
	l2 := newLessor(time.Hour)
	l2.observe(lease, t0)
	if len(l2.expired(t0.Add(3*time.Second))) != 1 {
		t.Fatal("not expired at its deadline")
	}
	l2.retrySoon("L")
	l2.expired(t0.Add(3 * time.Second))
	// An Expire is in flight: a renewal answered now would be undone by it.
	if l2.extend(lease, t0.Add(3*time.Second-1)) {
		t.Fatal("extended a lease whose Expire was proposed")
	}
	if l2.extend(Lease{Name: "unknown", Holder: "a", Token: 1, Renewed: 1, TTL: time.Second}, t0) {
		t.Fatal("extended a lease with no deadline")
	}
}

// naiveLessor is the lessor as it was before its expiry index: a scan of
// every deadline on every check. TestLessorMatchesTheNaiveScan checks the
// indexed one against it.
type naiveLessor struct {
	deadlines map[string]leaseDeadline
	retry     time.Duration
}

func (l *naiveLessor) observe(lease Lease, now time.Time) {
	if !lease.Held() {
		delete(l.deadlines, lease.Name)
		return
	}
	if d, ok := l.deadlines[lease.Name]; ok && d.token == lease.Token && d.renewed == lease.Renewed {
		return
	}
	l.deadlines[lease.Name] = leaseDeadline{token: lease.Token, renewed: lease.Renewed, at: now.Add(lease.TTL)}
}

func (l *naiveLessor) extend(lease Lease, now time.Time) bool {
	d, ok := l.deadlines[lease.Name]
	if !ok || d.token != lease.Token || d.renewed != lease.Renewed || !now.Before(d.at) || !d.proposed.IsZero() {
		return false
	}
	d.at = now.Add(lease.TTL)
	l.deadlines[lease.Name] = d
	return true
}

func (l *naiveLessor) expired(now time.Time) []string {
	var names []string
	for name, d := range l.deadlines {
		if now.Before(d.at) || (!d.proposed.IsZero() && now.Sub(d.proposed) < l.retry) {
			continue
		}
		d.proposed = now
		l.deadlines[name] = d
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func TestLessorMatchesTheNaiveScan(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 21))
		retry := time.Duration(1+rng.IntN(5)) * 100 * time.Millisecond
		fast, naive := newLessor(retry), &naiveLessor{deadlines: map[string]leaseDeadline{}, retry: retry}
		now := time.Unix(1000, 0)
		leases := map[string]Lease{}
		for step := range 2000 {
			now = now.Add(time.Duration(rng.IntN(200)) * time.Millisecond)
			name := fmt.Sprint("L", rng.IntN(20))
			switch rng.IntN(6) {
			case 0: // acquire, renew through the log, or release
				l := Lease{Name: name, Holder: "h", Token: uint64(step + 1), Renewed: uint64(step + 1), TTL: time.Duration(1+rng.IntN(20)) * 100 * time.Millisecond}
				if old, ok := leases[name]; ok && rng.IntN(2) == 0 {
					l.Token = old.Token
				}
				if rng.IntN(4) == 0 {
					l.Holder = ""
					delete(leases, name)
				} else {
					leases[name] = l
				}
				fast.observe(l, now)
				naive.observe(l, now)
			case 1, 2: // a renewal answered without the log
				l, ok := leases[name]
				if !ok {
					continue
				}
				if a, b := fast.extend(l, now), naive.extend(l, now); a != b {
					t.Fatalf("seed %d step %d: extend %s = %v, naive %v", seed, step, name, a, b)
				}
			case 3:
				if _, ok := fast.deadlines[name]; ok {
					fast.retrySoon(name)
					d := naive.deadlines[name]
					d.proposed = time.Time{}
					naive.deadlines[name] = d
				}
			default:
				var got []string
				for _, c := range fast.expired(now) {
					got = append(got, c.Key)
				}
				slices.Sort(got)
				if want := naive.expired(now); !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d: expired %v, naive scan %v", seed, step, got, want)
				}
			}
		}
	}
}

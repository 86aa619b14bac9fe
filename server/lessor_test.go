package server

import (
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

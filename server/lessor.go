package server

import "time"

// lessor keeps, on one node, when each held lease expires by this node's
// clock. Every node keeps one so that a new leader has deadlines at once;
// only the leader acts on them (see the package doc, "Lease expiry").
//
// lessor is not safe for concurrent use; the server guards it with the
// machine's lock. Time is passed in, so tests drive it without sleeping.
type lessor struct {
	deadlines map[string]leaseDeadline
	// retry is how long after proposing an Expire the lessor proposes it
	// again if it has not been applied (the proposal may have been lost in
	// a leader change).
	retry time.Duration
}

type leaseDeadline struct {
	token, renewed uint64
	at             time.Time
	// proposed is when an Expire was last proposed; zero if never.
	proposed time.Time
}

func newLessor(retry time.Duration) *lessor {
	return &lessor{deadlines: map[string]leaseDeadline{}, retry: retry}
}

// observe notes a lease record just changed by a command applied at now.
// An Acquire or Renew restarts the TTL from now: the apply happens after
// the holder sent its request, so the holder's own view of the expiry is
// never later than this one.
func (l *lessor) observe(lease Lease, now time.Time) {
	if !lease.Held() {
		delete(l.deadlines, lease.Name)
		return
	}
	d, ok := l.deadlines[lease.Name]
	if ok && d.token == lease.Token && d.renewed == lease.Renewed {
		return // nothing about the tenure changed
	}
	l.deadlines[lease.Name] = leaseDeadline{token: lease.Token, renewed: lease.Renewed, at: now.Add(lease.TTL)}
}

// promote runs when this node becomes leader: every held lease gets its
// full TTL again from now, so that none expires early because the old
// leader's deadlines died with it (etcd's lessor Promote does the same).
func (l *lessor) promote(held []Lease, now time.Time) {
	clear(l.deadlines)
	for _, lease := range held {
		l.deadlines[lease.Name] = leaseDeadline{token: lease.Token, renewed: lease.Renewed, at: now.Add(lease.TTL)}
	}
}

// expired returns the Expire commands the leader should propose at now:
// one per lease whose deadline passed and for which no Expire was proposed
// within the retry interval.
func (l *lessor) expired(now time.Time) []Command {
	var cmds []Command
	for name, d := range l.deadlines {
		if now.Before(d.at) || (!d.proposed.IsZero() && now.Sub(d.proposed) < l.retry) {
			continue
		}
		d.proposed = now
		l.deadlines[name] = d
		cmds = append(cmds, Command{Op: OpExpire, Key: name, Token: d.token, Renewed: d.renewed})
	}
	return cmds
}

// retrySoon forgets that an Expire for name was proposed, after the
// proposal failed, so that the next check proposes it again.
func (l *lessor) retrySoon(name string) {
	if d, ok := l.deadlines[name]; ok {
		d.proposed = time.Time{}
		l.deadlines[name] = d
	}
}

// remaining returns how long the lease has left by this node's clock, and
// whether it has a deadline at all.
func (l *lessor) remaining(name string, now time.Time) (time.Duration, bool) {
	d, ok := l.deadlines[name]
	if !ok {
		return 0, false
	}
	return max(d.at.Sub(now), 0), true
}

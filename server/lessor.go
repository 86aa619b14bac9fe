package server

import (
	"container/heap"
	"time"
)

// lessor keeps, on one node, when each held lease expires by this node's
// clock. Every node keeps one so that a new leader has deadlines at once;
// only the leader acts on them, and only the leader extends them for a
// renewal it answers without a Raft write (see the package doc, "Lease
// expiry", for why that is safe).
//
// The deadlines are indexed by the time they next need a look (a heap), so
// that a check costs the leases that expire, not every lease.
//
// lessor is not safe for concurrent use; the server guards it with the
// machine's lock. Time is passed in, so tests drive it without sleeping.
type lessor struct {
	deadlines map[string]*leaseDeadline
	due       deadlineHeap
	// retry is how long after proposing an Expire the lessor proposes it
	// again if it has not been applied (the proposal may have been lost in
	// a leader change). It must be positive.
	retry time.Duration
}

type leaseDeadline struct {
	name           string
	token, renewed uint64
	at             time.Time
	// proposed is when an Expire was last proposed; zero if never.
	proposed time.Time
	// heapIndex is the deadline's position in lessor.due.
	heapIndex int
}

// next returns when the deadline next needs a look: its time, or, once an
// Expire was proposed, the time to propose it again.
func (d *leaseDeadline) next(retry time.Duration) time.Time {
	if d.proposed.IsZero() {
		return d.at
	}
	if again := d.proposed.Add(retry); again.After(d.at) {
		return again
	}
	return d.at
}

func newLessor(retry time.Duration) *lessor {
	return &lessor{deadlines: map[string]*leaseDeadline{}, due: deadlineHeap{retry: retry}, retry: retry}
}

// set records d, replacing the deadline of the same lease.
func (l *lessor) set(d *leaseDeadline) {
	if old := l.deadlines[d.name]; old != nil {
		d.heapIndex = old.heapIndex
		l.due.items[d.heapIndex] = d
		l.deadlines[d.name] = d
		heap.Fix(&l.due, d.heapIndex)
		return
	}
	l.deadlines[d.name] = d
	heap.Push(&l.due, d)
}

func (l *lessor) forget(name string) {
	if d := l.deadlines[name]; d != nil {
		heap.Remove(&l.due, d.heapIndex)
		delete(l.deadlines, name)
	}
}

// observe notes a lease record just changed by a command applied at now.
// An Acquire or Renew restarts the TTL from now: the apply happens after
// the holder sent its request, so the holder's own view of the expiry is
// never later than this one.
func (l *lessor) observe(lease Lease, now time.Time) {
	if !lease.Held() {
		l.forget(lease.Name)
		return
	}
	d, ok := l.deadlines[lease.Name]
	if ok && d.token == lease.Token && d.renewed == lease.Renewed {
		return // nothing about the tenure changed
	}
	l.set(&leaseDeadline{name: lease.Name, token: lease.Token, renewed: lease.Renewed, at: now.Add(lease.TTL)})
}

// promote runs when this node becomes leader: every held lease gets its
// full TTL again from now, so that none expires early because the old
// leader's deadlines (and the renewals it answered without a Raft write)
// died with it (etcd's lessor Promote does the same).
func (l *lessor) promote(held []Lease, now time.Time) {
	clear(l.deadlines)
	l.due.items = l.due.items[:0]
	for _, lease := range held {
		l.set(&leaseDeadline{name: lease.Name, token: lease.Token, renewed: lease.Renewed, at: now.Add(lease.TTL)})
	}
}

// extend answers a renewal on the leader without a Raft write: the lease's
// deadline moves to now plus its TTL, if the lessor's deadline is about
// the same tenure and renewal, has not passed, and no Expire was proposed
// for it. Otherwise it changes nothing and returns false, and the renewal
// must go through the log (which changes lease.Renewed, so that an Expire
// already proposed finds the lease renewed and does nothing).
func (l *lessor) extend(lease Lease, now time.Time) bool {
	d := l.deadlines[lease.Name]
	if d == nil || d.token != lease.Token || d.renewed != lease.Renewed || !now.Before(d.at) || !d.proposed.IsZero() {
		return false
	}
	d.at = now.Add(lease.TTL)
	heap.Fix(&l.due, d.heapIndex)
	return true
}

// expired returns the Expire commands the leader should propose at now:
// one per lease whose deadline passed and for which no Expire was proposed
// within the retry interval. It looks only at those.
func (l *lessor) expired(now time.Time) []Command {
	var cmds []Command
	for len(l.due.items) > 0 {
		d := l.due.items[0]
		if now.Before(d.next(l.retry)) {
			break
		}
		d.proposed = now
		heap.Fix(&l.due, 0)
		cmds = append(cmds, Command{Op: OpExpire, Key: d.name, Token: d.token, Renewed: d.renewed})
	}
	return cmds
}

// retrySoon forgets that an Expire for name was proposed, after the
// proposal failed, so that the next check proposes it again.
func (l *lessor) retrySoon(name string) {
	if d := l.deadlines[name]; d != nil {
		d.proposed = time.Time{}
		heap.Fix(&l.due, d.heapIndex)
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

// deadlineHeap orders deadlines by the time they next need a look, then
// by name, so that the order is the same on every run.
type deadlineHeap struct {
	items []*leaseDeadline
	retry time.Duration
}

func (h *deadlineHeap) Len() int { return len(h.items) }

func (h *deadlineHeap) Less(i, j int) bool {
	a, b := h.items[i].next(h.retry), h.items[j].next(h.retry)
	if !a.Equal(b) {
		return a.Before(b)
	}
	return h.items[i].name < h.items[j].name
}

func (h *deadlineHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].heapIndex, h.items[j].heapIndex = i, j
}

func (h *deadlineHeap) Push(x any) {
	d := x.(*leaseDeadline)
	d.heapIndex = len(h.items)
	h.items = append(h.items, d)
}

func (h *deadlineHeap) Pop() any {
	d := h.items[len(h.items)-1]
	h.items[len(h.items)-1] = nil
	h.items = h.items[:len(h.items)-1]
	return d
}

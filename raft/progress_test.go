package raft

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"coord/internal/assert"
)

// checkFails runs f and returns the assertion message it panicked with, or
// "" if it did not panic.
func checkFails(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			failure, ok := r.(assert.Failure)
			if !ok {
				panic(r)
			}
			msg = failure.Message
		}
	}()
	f()
	return ""
}

// Progress's invariants hold through everything a leader does to it: a
// random walk of sends, acknowledgements (fresh, stale and duplicated),
// rejections with hints, unreachable reports, snapshots sent, installed,
// failed and timed out, and heartbeat answers, the way the core makes those
// calls. The invariants are checked after every step. Before the review,
// becomeSnapshot left Next where it was, and a rejection while replicating
// lowered Next below appends still in flight until the caller moved the
// follower to Probe: both break them.
func TestProgressInvariantsHoldUnderRandomUse(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		last := uint64(rng.IntN(20) + 1)                                // the leader's last index
		pr := newProgress(last+1, 1+rng.IntN(4), uint64(rng.IntN(3))*3) // 0: no bound on bytes
		var trace []string
		step := func(what string, f func()) {
			trace = append(trace, what)
			if msg := checkFails(func() { f(); pr.check() }); msg != "" {
				t.Fatalf("seed %d: after %s: %s\ntrace: %s", seed, what, msg, strings.Join(trace, ", "))
			}
		}
		for range 400 {
			switch rng.IntN(10) {
			case 0: // the leader appends
				n := uint64(rng.IntN(3) + 1)
				step(fmt.Sprintf("append %d", n), func() { last += n })
			case 1: // sendAppend
				if pr.isPaused() || pr.Next > last+1 {
					continue
				}
				count := rng.IntN(int(last+1-pr.Next) + 1)
				if pr.State == ProgressReplicate && count == 0 {
					continue // the core sends empty appends only to probe
				}
				step(fmt.Sprintf("send %d from %d", count, pr.Next), func() {
					pr.sentEntries(count, pr.Next-1+uint64(count), uint64(count))
				})
			case 2: // an acknowledgement, possibly stale or duplicated
				n := uint64(rng.IntN(int(min(pr.Next, last+1))))
				step(fmt.Sprintf("ack %d", n), func() {
					if pr.maybeUpdate(n) || (pr.State == ProgressProbe && n == pr.Match) {
						if pr.State == ProgressProbe {
							pr.becomeReplicate()
						}
					}
				})
			case 3: // a rejection of the append after rejected, with a hint
				rejected := pr.Match + uint64(rng.IntN(int(pr.Next-pr.Match)))
				hint := uint64(rng.IntN(int(rejected + 1)))
				step(fmt.Sprintf("reject %d hint %d", rejected, hint), func() { pr.maybeDecrTo(rejected, hint) })
			case 4: // ReportUnreachable
				if pr.State == ProgressReplicate {
					step("unreachable", pr.becomeProbe)
				}
			case 5: // the entries at Next were compacted: send a snapshot
				if pr.State == ProgressSnapshot {
					continue
				}
				index := pr.Next + uint64(rng.IntN(int(last+1-min(pr.Next, last+1))+1))
				step(fmt.Sprintf("snapshot %d", index), func() { pr.becomeSnapshot(index) })
			case 6: // the snapshot is installed, reported, failed or timed out
				if pr.State != ProgressSnapshot {
					continue
				}
				switch rng.IntN(3) {
				case 0:
					n := pr.PendingSnapshot
					step(fmt.Sprintf("snapshot response %d", n), func() { pr.maybeUpdate(n); pr.becomeProbe() })
				case 1:
					step("snapshot failed", func() { pr.PendingSnapshot = 0; pr.becomeProbe(); pr.ProbeSent = true })
				default:
					step("snapshot timed out", func() { pr.PendingSnapshot = 0; pr.becomeProbe() })
				}
			case 7: // a heartbeat answer
				step("heartbeat response", func() {
					pr.ProbeSent = false
					pr.emptyAppendDue(last)
				})
			case 8: // snapshot ticks
				if pr.State == ProgressSnapshot {
					step("tick", func() { pr.snapshotTicks++ })
				}
			case 9: // a heartbeat interval begins
				step("heartbeat interval", pr.newHeartbeatInterval)
			}
		}
	}
}

// The checker is not vacuous: each invariant, broken by hand, fails it with
// a message naming both sides.
func TestProgressCheckCatchesBrokenInvariants(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Progress)
		want   string
	}{
		{"match not below next", func(p *Progress) { p.Match = p.Next }, "match 5 >= next 5"},
		{"snapshot state without a snapshot", func(p *Progress) { p.State = ProgressSnapshot }, "no pending snapshot"},
		{"snapshot state, next elsewhere", func(p *Progress) { p.State, p.PendingSnapshot = ProgressSnapshot, 9 }, "next 5 in state snapshot"},
		{"pending snapshot while probing", func(p *Progress) { p.PendingSnapshot = 3 }, "pending snapshot 3 in state probe"},
		{"probe sent while replicating", func(p *Progress) { p.State, p.ProbeSent = ProgressReplicate, true }, "probe sent in state replicate"},
		{"empty append sent while probing", func(p *Progress) { p.emptyAppendSent = true }, "empty append sent in state probe"},
		{"in flight while probing", func(p *Progress) { p.inflights.add(4, 1) }, "1 appends in flight in state probe"},
		{"in flight at or below match", func(p *Progress) { p.State = ProgressReplicate; p.inflights.add(2, 1) }, "outside (match 3, next 5)"},
		{"in flight at or past next", func(p *Progress) { p.State = ProgressReplicate; p.inflights.add(5, 1) }, "outside (match 3, next 5)"},
	}
	for _, tt := range tests {
		p := newProgress(5, 4, 0)
		p.Match = 3
		tt.mutate(p)
		if msg := checkFails(p.check); !strings.Contains(msg, tt.want) {
			t.Errorf("%s: check() failed with %q, want it to say %q", tt.name, msg, tt.want)
		}
	}
}

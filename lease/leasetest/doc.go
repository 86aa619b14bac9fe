// Package leasetest is the conformance suite that every lease.Backend runs,
// as fstest.TestFS is for file systems and slogtest.Run for slog handlers:
//
//	func TestConformance(t *testing.T) {
//		dir := t.TempDir()
//		leasetest.Run(t, func(t *testing.T) lease.Backend {
//			b, err := file.Open(filepath.Join(dir, "leader.lock"), file.Options{})
//			if err != nil {
//				t.Fatal(err)
//			}
//			return b
//		})
//	}
//
// Run checks the Backend contract one operation at a time (acquire, renew,
// release, get, watch, expiry, crashed holders, growing tokens, invalid
// arguments, use after Close, an Elector on top), then runs the exclusivity
// checker (CheckExclusivity): contenders that crash, pause and release at
// random while writing to a FencedResource, with checks that no two
// tenures overlap and that fencing tokens only grow.
//
// RunProcesses adds the checks that need real OS processes (a leader
// killed, terminated, stopped), driving the built coord binary
// (`coord elect --store URL --json`) against any store URL; BuildCoord
// builds it once from TestMain. Group, which starts and observes such
// processes, is exported for tests that need other scenarios: Add starts a
// participant with an environment of its own, Record merges events from the
// test's own process, and CheckOneLeader checks the merged timeline (no two
// leaders at once, tokens that only grow).
//
// Faulty wraps a Backend to break it on purpose for an Elector on top:
// renewals that hang, fail, or succeed in the store with their answers held
// back past their deadline (HoldRenewalAnswers).
//
// FencedResource is the resource of Kleppmann's fencing argument, usable on
// its own: it rejects writes whose token is lower than one it has accepted.
package leasetest

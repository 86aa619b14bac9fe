package sim

import "testing"

// Each seed draws its byte limits from a stream of its own, and the
// sweep's seeds draw every kind. Under faults, with every checker:
// candidates hold writes, end some with ErrNotElected, and refuse some at
// once past their byte bound (only seeds with a bound do); and snapshots
// triggered by bytes are taken (a seed that draws them snapshots more often
// than with them off).
func TestByteLimitsRunUnderFaults(t *testing.T) {
	const seeds = 100
	var kinds struct{ snapshotBytes, electionWrites, electionBytes int }
	var held, notElected, refusedBounded, refusedUnbounded int
	snapshotSeed := uint64(0)
	for seed := uint64(1); seed <= seeds; seed++ {
		l := drawByteLimits(seed)
		if l.snapshotBytes > 0 {
			kinds.snapshotBytes++
			if snapshotSeed == 0 && l.snapshotBytes <= 16 {
				snapshotSeed = seed
			}
		}
		if l.electionWrites {
			kinds.electionWrites++
		}
		if l.electionBytes > 0 {
			kinds.electionBytes++
		}
		res := Run(testConfig(seed))
		if res.Err != nil {
			t.Fatalf("%v", res.Err)
		}
		held += res.Stats.ElectionWrites
		notElected += res.Stats.ElectionWritesNotElected
		if l.electionBytes > 0 {
			refusedBounded += res.Stats.ElectionWritesRefused
		} else {
			refusedUnbounded += res.Stats.ElectionWritesRefused
		}
	}
	t.Logf("%d seeds: %+v; writes held %d, not elected %d, refused at once %d with a byte bound and %d without",
		seeds, kinds, held, notElected, refusedBounded, refusedUnbounded)
	if kinds.snapshotBytes == 0 || kinds.snapshotBytes == seeds || kinds.electionWrites == 0 || kinds.electionWrites == seeds ||
		kinds.electionBytes == 0 || kinds.electionBytes == kinds.electionWrites {
		t.Fatalf("the draws do not vary: %+v of %d seeds", kinds, seeds)
	}
	if held == 0 || notElected == 0 || refusedBounded == 0 {
		t.Fatalf("candidates held %d writes, %d not elected, %d refused past a byte bound: want some of each", held, notElected, refusedBounded)
	}

	snapshots := func(snapshotBytes uint64) int {
		cfg := testConfig(snapshotSeed)
		cfg.Faults = nil
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s.limits.snapshotBytes = snapshotBytes
		res := s.Run()
		if res.Err != nil {
			t.Fatalf("%v", res.Err)
		}
		return res.Stats.Snapshots
	}
	drawn := drawByteLimits(snapshotSeed).snapshotBytes
	if with, without := snapshots(drawn), snapshots(0); with <= without {
		t.Fatalf("seed %d: %d snapshots with SnapshotBytes %d, %d without: the byte trigger did not fire", snapshotSeed, with, drawn, without)
	} else {
		t.Logf("seed %d without faults: %d snapshots with SnapshotBytes %d, %d without", snapshotSeed, with, drawn, without)
	}
}

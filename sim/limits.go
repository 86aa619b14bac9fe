package sim

import (
	"fmt"
	"math/rand/v2"
)

// byteLimits are the byte bounds of the nodes' handlers that a seed
// chooses, small or none, so that what they trigger runs under faults:
// snapshots taken for the bytes applied (node.HandlerConfig.SnapshotBytes)
// beside those for the entries, and a candidate's held writes
// (node.Handler.ProposeAtElection) and their bound
// (node.HandlerConfig.MaxElectionProposalBytes). A write is a few bytes
// ("w123"), so 16 bytes is a snapshot every four or five writes, sooner
// than SnapshotEntries; and a bound of 4 bytes holds one write, 12 two
// or three.
type byteLimits struct {
	// snapshotBytes is HandlerConfig.SnapshotBytes; 0: snapshots by the
	// entry count alone.
	snapshotBytes uint64
	// electionWrites sends the writes that reach a candidate through
	// ProposeAtElection (otherwise they are forwarded, and refused for
	// want of a leader).
	electionWrites bool
	// electionBytes is HandlerConfig.MaxElectionProposalBytes; 0: the
	// count bound alone.
	electionBytes uint64
}

// drawByteLimits chooses a seed's byte limits from a stream of their own:
// the main stream, and so the whole run of a seed that draws none, is as
// before they were added. Half the seeds snapshot by bytes too, half send
// writes to candidates, two thirds of those with a byte bound.
func drawByteLimits(seed uint64) byteLimits {
	rng := rand.New(rand.NewPCG(seed, 0xb17e5))
	l := byteLimits{
		snapshotBytes:  []uint64{0, 0, 16, 64}[rng.IntN(4)],
		electionWrites: rng.IntN(2) == 0,
	}
	if l.electionWrites {
		l.electionBytes = []uint64{0, 4, 12}[rng.IntN(3)]
	}
	return l
}

// String describes the limits for a run's trace.
func (l byteLimits) String() string {
	writes := "forwarded"
	if l.electionWrites {
		writes = fmt.Sprintf("held (bytes held at most %d, 0: no bound)", l.electionBytes)
	}
	return fmt.Sprintf("snapshot bytes %d (0: entries alone); writes to a candidate %s", l.snapshotBytes, writes)
}

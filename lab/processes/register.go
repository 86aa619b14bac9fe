//go:build linux

package processes

import (
	"coord/lab"

	_ "coord/lease/file" // file:// stores for coord's side of every experiment
)

// The experiments register in the order Part 2 tells them.
func init() {
	lab.Register(exclusiveCreateExperiment)
	lab.Register(failoverExperiment)
	lab.Register(emptyFileExperiment)
	lab.Register(takeoverRaceExperiment)
	lab.Register(pausedLeaderExperiment)
	lab.RegisterChild(childContend, contendChild)
	lab.RegisterChild(childArticlesLease, articlesLeaseChild)
	lab.RegisterChild(childFencedLeader, fencedLeaderChild)
}

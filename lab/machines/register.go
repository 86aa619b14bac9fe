package machines

import "coord/lab"

// The experiments register in the order Part 3 tells them.
func init() {
	lab.Register(failoverExperiment)
	lab.Register(blockingExperiment)
	lab.Register(partitionExperiment)
	lab.Register(quorumExperiment)
	lab.RegisterChild(childArticlesRaft, articlesChild)
}

package machines

import "coord/lab"

// The experiments register in the order Part 3 tells them.
func init() {
	lab.Register(blockingExperiment)
	lab.RegisterChild(childArticlesRaft, articlesChild)
}

package threads

import "coord/lab"

// The experiments register in the order Part 4 presents them.
func init() {
	lab.Register(raceExperiment)
	lab.Register(mutexExperiment)
	lab.Register(granularityExperiment)
	lab.Register(semaphoreExperiment)
	lab.Register(prodconsExperiment)
	lab.Register(deadlockExperiment)
	lab.RegisterChild(childProdcons, prodconsChild)
	lab.RegisterChild(childDeadlock, deadlockChild)
}

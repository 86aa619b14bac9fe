//go:build !linux

package threads

import "time"

// threadCPUMeasured says whether threadCPU measures anything here.
const threadCPUMeasured = false

// threadCPU returns 0: only Linux reports one thread's CPU time
// (RUSAGE_THREAD), so elsewhere the race experiment reports no core count.
func threadCPU() time.Duration { return 0 }

package threads

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPUMeasured says whether threadCPU measures anything here.
const threadCPUMeasured = true

// threadCPU returns the CPU time the calling thread has used, or 0 where the
// kernel cannot say.
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

//go:build linux || darwin

package eventlog

import "golang.org/x/sys/unix"

// MonotonicNow returns CLOCK_MONOTONIC in nanoseconds: the clock Go's
// time.Now uses for durations, shared by every process of one boot. It
// returns 0 if the clock cannot be read.
func MonotonicNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

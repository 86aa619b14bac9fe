package sqlite

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// machineNow returns CLOCK_BOOTTIME in nanoseconds: shared by every process
// on the machine, never stepped, counting through suspend.
func machineNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic(fmt.Sprintf("lease/sqlite: clock_gettime(CLOCK_BOOTTIME): %v", err)) // cannot fail on Linux ≥ 2.6.39
	}
	return ts.Nano()
}

// bootID returns the kernel's boot id, new at every boot.
func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("lease/sqlite: read boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

//go:build !linux

package sqlite

import "time"

// machineNow returns the wall clock in nanoseconds: the only clock that
// processes share on systems without CLOCK_BOOTTIME. A clock step moves
// every expiry with it.
func machineNow() int64 { return time.Now().UnixNano() }

// bootID returns a constant: the wall clock does not restart at boot.
func bootID() (string, error) { return "wall", nil }

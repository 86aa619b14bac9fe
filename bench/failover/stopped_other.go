//go:build !linux

package failover

import "fmt"

// waitStopped reports that a stopped contender cannot be waited for here:
// only the file store, which needs Linux, has the hook that stops one
// inside its compare-and-swap.
func waitStopped(int) error {
	return fmt.Errorf("%w: waiting for a stopped process needs Linux (waitid with WSTOPPED), as does the file store whose hook stops it", ErrInvalid)
}

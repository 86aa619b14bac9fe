package failover

import "golang.org/x/sys/unix"

// waitStopped blocks until the child pid is stopped by a signal, leaving it
// waitable (WNOWAIT) so that its eventual exit is still reaped by
// exec.Cmd.Wait.
func waitStopped(pid int) error {
	var info unix.Siginfo
	return unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WNOWAIT, nil)
}

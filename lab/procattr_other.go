//go:build unix && !linux

package lab

import "syscall"

// childProcAttr puts a child in its own process group. Only Linux has
// Pdeathsig: here a lab killed with SIGKILL leaves its children running
// until they exit on their own (a lab stopped by its context still kills
// them, through exec.Cmd's Cancel).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

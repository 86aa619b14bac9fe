package lab

import "syscall"

// childProcAttr puts a child in its own process group and has the kernel
// kill it when the lab dies (Pdeathsig): a lab killed with SIGKILL must not
// leave `coord elect` processes campaigning forever.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

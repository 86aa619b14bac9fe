package job

import (
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// terminal does a shell's part of job control for one job: the job's
// process group gets the terminal while it runs in the foreground; when the
// job stops, this process takes the terminal back and stops too, so that
// the shell that started it sees a stopped job; when this process is
// continued (fg, bg), it gives the terminal back if it is in the foreground
// again and continues the job.
//
// terminal is safe for concurrent use.
type terminal struct {
	fd      int
	ownPgrp int
	cont    chan os.Signal
	quit    chan struct{}

	mu      sync.Mutex
	jobPgid int // set while the job is stopped
}

func newTerminal(f *os.File) *terminal {
	t := &terminal{fd: int(f.Fd()), ownPgrp: unix.Getpgrp(), cont: make(chan os.Signal, 1), quit: make(chan struct{})}
	signal.Notify(t.cont, syscall.SIGCONT)
	go t.continued()
	return t
}

// isForeground reports whether this process's group is the terminal's
// foreground group.
func (t *terminal) isForeground() bool {
	pgrp, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP)
	return err == nil && pgrp == t.ownPgrp
}

// setForeground makes pgrp the terminal's foreground group. A process in a
// background group may do so only with SIGTTOU blocked or ignored (else the
// kernel stops it, tcsetpgrp(3)); blocking it on one locked thread leaves
// the disposition, which children inherit, alone.
func (t *terminal) setForeground(pgrp int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.Sigset_t
	sig := uint(syscall.SIGTTOU) - 1
	set.Val[sig/64] |= 1 << (sig % 64)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old); err != nil {
		return err
	}
	defer unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	return unix.IoctlSetPointerInt(t.fd, unix.TIOCSPGRP, pgrp)
}

// takeBack gives the terminal back to this process's group if the job's
// group has it.
func (t *terminal) takeBack(jobPgid int) {
	if pgrp, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP); err == nil && pgrp == jobPgid {
		t.setForeground(t.ownPgrp)
	}
}

// jobStopped takes the terminal back and stops this process's group with
// the job's stop signal, as the terminal would have stopped a job run by
// the shell directly.
func (t *terminal) jobStopped(jobPgid int, sig syscall.Signal) {
	t.mu.Lock()
	t.jobPgid = jobPgid
	t.mu.Unlock()
	t.takeBack(jobPgid)
	if sig != syscall.SIGSTOP && sig != syscall.SIGTSTP && sig != syscall.SIGTTIN && sig != syscall.SIGTTOU {
		sig = syscall.SIGTSTP
	}
	unix.Kill(0, sig)
}

// continued waits for SIGCONT and resumes a stopped job.
func (t *terminal) continued() {
	for {
		select {
		case <-t.quit:
			return
		case <-t.cont:
		}
		t.mu.Lock()
		pgid := t.jobPgid
		t.jobPgid = 0
		t.mu.Unlock()
		if pgid == 0 {
			continue
		}
		if t.isForeground() {
			t.setForeground(pgid)
		}
		unix.Kill(-pgid, syscall.SIGCONT)
	}
}

// stop ends the SIGCONT watch.
func (t *terminal) stop() {
	signal.Stop(t.cont)
	close(t.quit)
}

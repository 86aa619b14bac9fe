// Package job runs a command as a contained job: every process it starts,
// including double-forked and setsid ones, is dead before Wait returns, and
// dies with the process that started it however that process dies. It is
// what `coord run` stands on: a lease must not pass to another holder while
// any process of the previous holder's job still runs.
//
// # Why a process group is not enough
//
// A process group holds a job only until one of its processes calls
// setsid(2) or setpgid(2), as every daemon does; killing the group then
// misses it. PR_SET_PDEATHSIG reaches only the direct child. So a job is
// contained by one of these, the strongest the kernel allows (Auto):
//
//   - PIDNamespace: a shim (a re-execution of this program, Config.Shim,
//     which calls Init) is init of a new PID namespace and starts the
//     command in it. Every process the command starts is in the namespace,
//     whatever it does with sessions and groups. When init dies, however it
//     dies, the kernel SIGKILLs every process of the namespace, and the
//     shim's parent is told of init's death only once the namespace is
//     empty (zap_pid_ns_processes waits for them). The shim gets SIGKILL
//     when its parent dies (PR_SET_PDEATHSIG), so a SIGKILL or an OOM kill of
//     the parent ends the job within the kernel's exit path, with no user
//     code in between. Creating a PID namespace needs CAP_SYS_ADMIN: as
//     root it is used as such; otherwise the shim gets a new user namespace
//     too (its uid and gid mapped to themselves), where the kernel allows
//     unprivileged user namespaces.
//   - Subreaper, the fallback where no namespace can be created (a
//     container without CAP_SYS_ADMIN, user namespaces disabled): the shim
//     is a child subreaper (PR_SET_CHILD_SUBREAPER), so every orphan of the
//     job is re-parented to it rather than to the system's init, and it
//     kills and reaps its children until none is left before it exits. It
//     notices its parent's death by end of file on a pipe only the parent
//     holds. A SIGKILL of the shim itself (not of its parent) lets the job's
//     processes escape: that is the gap this mode leaves, and Start says so
//     in one log line when it falls back to it.
//
// cgroup v2's cgroup.kill would kill a job as reliably, but nothing writes
// it when the process that owns the cgroup is SIGKILLed, and it needs a
// delegated cgroup: the namespace needs neither.
//
// # Ordering with a lease
//
// Wait returns only when every process of the job is gone. Files passed in
// Config.ExtraFiles are inherited by the command and whatever it starts
// that keeps them (fork, setsid and daemon(3) keep descriptors): `coord run`
// passes the file store's tenure socket this way, so that a file lease
// stays held after `coord run` is SIGKILLed until the last process holding
// the socket has exited. A process that closed its copy (a daemon closing
// every descriptor) is still in the namespace: the kernel sends SIGKILL to
// the whole namespace in one pass under the tasklist lock, microseconds,
// while a new holder needs milliseconds to start a job of its own.
//
// A parent that is alive but stopped or hung cannot stop its job; the shim
// can: Job.SetDeadline gives it a CLOCK_MONOTONIC instant at which it kills
// the job unless a later one arrives first. `coord run` sets it a little
// before its lease could expire, so that a paused `coord run` cannot leave
// its job running into another holder's lease.
//
// # Terminal and signals
//
// The job runs in its own process group (the shim's). With
// Config.Terminal set, that group is the terminal's foreground group while
// the job runs in the foreground, so the command reads the terminal and
// Ctrl-C, Ctrl-\ and Ctrl-Z reach it directly, as with a shell. When the
// command stops, the parent takes the terminal back and stops itself with
// the same signal, so that the shell sees a stopped job; on SIGCONT (fg,
// bg) it gives the terminal back if it is in the foreground and continues
// the job. Job.Signal sends a signal to the job's group as the terminal
// does. The shim acts on no signal itself: it only reaps and reports.
//
// # What it does not do
//
// Inside a PID namespace the command sees namespace pids: it is pid 2, and
// a pid file it writes names a pid that means nothing outside. /proc is not
// remounted, so ps still shows the host. In a user namespace, files owned
// by unmapped users look owned by nobody and setuid programs (sudo) do not
// gain privileges. Use Containment Subreaper where that matters more than
// a job that outlives a SIGKILLed shim.
package job

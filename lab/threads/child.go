package threads

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
)

// deadlockMessage is how the Go runtime reports a program whose every
// goroutine is blocked.
const deadlockMessage = "fatal error: all goroutines are asleep - deadlock!"

// childRun is how one run of a child process ended.
type childRun struct {
	// ExitCode is the child's exit status; -1 if it was killed by a signal.
	ExitCode int `json:"exit_code"`

	// RuntimeDeadlock says the runtime printed deadlockMessage.
	RuntimeDeadlock bool `json:"runtime_deadlock"`

	// Hung says the child did not end by itself within the timeout; it was
	// sent SIGQUIT for a goroutine dump, then killed.
	Hung bool `json:"hung"`

	// Seconds is how long the child ran.
	Seconds float64 `json:"seconds"`

	// Stdout is what the child printed on stdout (trimmed).
	Stdout string `json:"stdout,omitempty"`

	// Goroutines counts the goroutines of the dump by the state they were
	// blocked in ("sync.Mutex.Lock": 2).
	Goroutines map[string]int `json:"goroutines,omitempty"`
}

// Completed says the child ran to its end and exited 0.
func (c childRun) Completed() bool { return c.ExitCode == 0 && !c.Hung }

// Deadlocked says the child was caught in a deadlock: reported by the runtime,
// or hung until the timeout.
func (c childRun) Deadlocked() bool { return c.RuntimeDeadlock || c.Hung }

// describe says how the run ended, for a detail line: the runtime's report,
// a hang caught by the timeout, or an end of its own.
func (c childRun) describe() string {
	switch {
	case c.RuntimeDeadlock:
		return fmt.Sprintf("%q after %s, exit status %d; goroutines: %s", deadlockMessage, millis(c.Seconds), c.ExitCode, describeStates(c.Goroutines))
	case c.Hung:
		return fmt.Sprintf("hung with no runtime report; killed after %s; goroutines: %s", millis(c.Seconds), describeStates(c.Goroutines))
	}
	return fmt.Sprintf("ended by itself, exit status %d, printed %q", c.ExitCode, c.Stdout)
}

// countRuns counts the runs for which pred holds.
func countRuns(runs []childRun, pred func(childRun) bool) int {
	n := 0
	for _, r := range runs {
		if pred(r) {
			n++
		}
	}
	return n
}

// runtimeReported says the runtime reported the deadlock itself.
func runtimeReported(c childRun) bool { return c.RuntimeDeadlock }

// runProcess starts cmd, waits for it up to timeout, and reads how it ended.
// A process still running at the timeout is sent SIGQUIT, which makes a Go
// program print every goroutine's stack and exit, then killed if it does not.
// GOTRACEBACK=all makes the runtime's fatal reports list every goroutine.
func runProcess(ctx context.Context, cmd *exec.Cmd, timeout time.Duration) (childRun, error) {
	name := filepath.Base(cmd.Path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(cmd.Environ(), "GOTRACEBACK=all")
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return childRun{}, fmt.Errorf("threads: start child %s: %w", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var run childRun
	var err error
	select {
	case err = <-done:
	case <-time.After(timeout):
		// Ask for a goroutine dump, then make sure it ends.
		run.Hung = true
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case err = <-done:
		case <-time.After(2 * time.Second):
			_ = cmd.Process.Kill()
			err = <-done
		}
	}
	run.Seconds = time.Since(start).Seconds()
	if ctx.Err() != nil {
		return childRun{}, ctx.Err()
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		run.ExitCode = exit.ExitCode()
	case err != nil:
		return childRun{}, fmt.Errorf("threads: child %s: %w", name, err)
	}
	run.Stdout = strings.TrimSpace(stdout.String())
	run.RuntimeDeadlock = strings.Contains(stderr.String(), deadlockMessage)
	run.Goroutines = goroutineStates(stderr.String())
	return run, nil
}

var goroutineHeader = regexp.MustCompile(`^goroutine (\d+) (?:gp=\S+ m=\S+ (?:mp=\S+ )?)?\[([^\],]+)`)

// goroutineStates counts the program's own goroutines in a traceback by
// the state they were blocked in. The runtime's helpers (the garbage
// collector's, the finalizer's, os/signal's watcher), which a SIGQUIT dump
// lists too, are left out.
func goroutineStates(traceback string) map[string]int {
	states := map[string]int{}
	for _, block := range strings.Split(traceback, "\n\n") {
		block = strings.TrimLeft(block, "\n")
		m := goroutineHeader.FindStringSubmatch(block)
		if m == nil || m[1] == "0" || strings.Contains(block, "\ncreated by runtime.") || strings.Contains(block, "\ncreated by os/signal.") {
			continue
		}
		states[m[2]]++
	}
	if len(states) == 0 {
		return nil
	}
	return states
}

// describeStates formats goroutine states: "1 in sync.WaitGroup.Wait, 2 in
// chan receive".
func describeStates(states map[string]int) string {
	if len(states) == 0 {
		return "no goroutine dump"
	}
	keys := make([]string, 0, len(states))
	for k := range states {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d in %s", states[k], k))
	}
	return strings.Join(parts, ", ")
}

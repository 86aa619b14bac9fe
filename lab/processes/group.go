//go:build linux

package processes

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"coord/lease"
	"coord/lease/eventlog"
)

// event is one JSON event a participant printed, with the name the lab gave
// the participant.
type event struct {
	lease.Event
	// Member is the participant's name in its group ("p1").
	Member string `json:"member"`
}

// member is one participant process.
type member struct {
	name   string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{} // closed when the process has exited and its output is read
	exit   int           // exit status; -1 if killed by a signal
	// exitMono is the monotonic time the lab saw the process exit.
	exitMono int64
	// killedMono is the monotonic time just before the lab sent SIGKILL,
	// or 0.
	killedMono int64
}

// group is a set of participant processes whose JSON event lines are merged
// into one timeline. Its methods are safe for concurrent use.
type group struct {
	mu      sync.Mutex
	members map[string]*member
	order   []string
	events  []event
	changed chan struct{} // closed and replaced whenever something happens
}

func newGroup() *group {
	return &group{members: map[string]*member{}, changed: make(chan struct{})}
}

// start starts cmd as the participant name. Its stdout is read as JSON event
// lines (other lines are ignored); its stderr is kept for the report.
func (g *group) start(name string, cmd *exec.Cmd) error {
	cmd.Stdout = nil // lab.Command discards output; we read it
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("processes: %s: %w", name, err)
	}
	m := &member{name: name, cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = m.stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("processes: start %s: %w", name, err)
	}
	g.mu.Lock()
	g.members[name] = m
	g.order = append(g.order, name)
	g.mu.Unlock()
	go g.read(m, stdout)
	return nil
}

func (g *group) read(m *member, stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e.Event); err != nil || e.Event.Event == "" {
			continue
		}
		e.Member = m.name
		g.mu.Lock()
		g.events = append(g.events, e)
		g.broadcastLocked()
		g.mu.Unlock()
	}
	err := m.cmd.Wait()
	var exit *exec.ExitError
	g.mu.Lock()
	switch {
	case errors.As(err, &exit):
		m.exit = exit.ExitCode()
	case err != nil:
		m.exit = -1
	}
	m.exitMono = eventlog.MonotonicNow()
	close(m.done)
	g.broadcastLocked()
	g.mu.Unlock()
}

func (g *group) broadcastLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// waitFor waits until check, called with the group locked on the events so
// far, returns true, or until timeout or ctx ends. It reports whether check
// succeeded.
func (g *group) waitFor(ctx context.Context, timeout time.Duration, check func(events []event) bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		g.mu.Lock()
		ok := check(g.events)
		changed := g.changed
		g.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// waitEvent waits for the first event satisfying pred and returns it.
func (g *group) waitEvent(ctx context.Context, timeout time.Duration, pred func(event) bool) (event, bool) {
	var found event
	ok := g.waitFor(ctx, timeout, func(events []event) bool {
		for _, e := range events {
			if pred(e) {
				found = e
				return true
			}
		}
		return false
	})
	return found, ok
}

// snapshot returns the events so far, in arrival order.
func (g *group) snapshot() []event {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]event(nil), g.events...)
}

// signal sends sig to the participant name and returns the monotonic time
// just before it was sent.
func (g *group) signal(name string, sig syscall.Signal) (int64, error) {
	g.mu.Lock()
	m, ok := g.members[name]
	g.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("processes: no participant %q", name)
	}
	at := eventlog.MonotonicNow()
	if err := m.cmd.Process.Signal(sig); err != nil {
		return 0, fmt.Errorf("processes: signal %v to %s: %w", sig, name, err)
	}
	if sig == syscall.SIGKILL {
		g.mu.Lock()
		m.killedMono = at
		g.mu.Unlock()
	}
	return at, nil
}

// waitExit waits until participant name has exited and all it printed has
// been read, or until timeout or ctx ends. It reports whether it exited.
// Events reach the lab through one pipe per participant, so a successor's
// election can be read before the events its predecessor printed earlier:
// a timeline is complete only once the predecessor's pipe is drained.
func (g *group) waitExit(ctx context.Context, name string, timeout time.Duration) bool {
	g.mu.Lock()
	m, ok := g.members[name]
	g.mu.Unlock()
	if !ok {
		return false
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	select {
	case <-m.done:
		return true
	case <-deadline.C:
	case <-ctx.Done():
	}
	return false
}

// stderr returns what participant name printed on stderr.
func (g *group) stderr(name string) string {
	g.mu.Lock()
	m, ok := g.members[name]
	g.mu.Unlock()
	if !ok {
		return ""
	}
	return m.stderr.String()
}

// exitTimes returns, for each participant that has exited or been sent
// SIGKILL, the monotonic time taken as the end of its life: when the lab
// sent SIGKILL, or else when the lab saw it exit.
//
// A process runs none of its own code once SIGKILL is delivered, which is
// within microseconds of the send, while the lab sees its exit only after
// its output pipe has drained and the reading goroutine has been
// scheduled: on a loaded machine that is milliseconds after a successor,
// woken by the same death, announced its election. The exit time would
// count the dead process as a leader alongside its successor.
func (g *group) exitTimes() map[string]int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]int64{}
	for name, m := range g.members {
		switch {
		case m.killedMono != 0:
			out[name] = m.killedMono
		case m.exitMono != 0:
			out[name] = m.exitMono
		}
	}
	return out
}

// stop kills every participant (continuing any that are stopped first) and
// waits for them to exit, so that everything they printed has been read.
// It may be called more than once.
func (g *group) stop() {
	g.mu.Lock()
	members := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		members = append(members, m)
	}
	g.mu.Unlock()
	for _, m := range members {
		_ = m.cmd.Process.Signal(syscall.SIGCONT)
		_ = m.cmd.Process.Kill()
	}
	for _, m := range members {
		select {
		case <-m.done:
		case <-time.After(10 * time.Second):
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for one writer and many readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 { // bound what a chatty process can make us keep
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// maxLeaders returns the largest number of participants that believed at
// the same moment that they held the lease, following each one's own
// events: elected starts a tenure; lost, released, or a newer tenure seen
// by the same participant ends it. Events are ordered by their monotonic
// stamps. exited gives, per participant, the monotonic time it died (or 0).
func maxLeaders(events []event, exited map[string]int64) int {
	type change struct {
		at    int64
		delta int
	}
	leading := map[string]bool{}
	var changes []change
	sorted := sortedByMono(events)
	for _, e := range sorted {
		switch e.Event.Event {
		case lease.EventElected:
			if !leading[e.Member] {
				leading[e.Member] = true
				changes = append(changes, change{e.MonoNS, +1})
			}
		case lease.EventLost, lease.EventReleased:
			if leading[e.Member] {
				leading[e.Member] = false
				changes = append(changes, change{e.MonoNS, -1})
			}
		}
	}
	for m, at := range exited {
		if leading[m] && at > 0 {
			changes = append(changes, change{at, -1})
		}
	}
	// Ends sort before starts at the same instant.
	slices.SortFunc(changes, func(a, b change) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
	best, now := 0, 0
	for _, c := range changes {
		now += c.delta
		best = max(best, now)
	}
	return best
}

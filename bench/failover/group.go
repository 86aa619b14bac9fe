package failover

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"time"

	"coord/lease"
	"coord/lease/eventlog"
)

// proc is one participant process and its events.
type proc struct {
	cmd    *exec.Cmd
	stdout io.ReadCloser
	holder string // the holder name it records: its --id, or its pid
	exited chan struct{}

	// Owned by the group's goroutine.
	lastLeader string // holder of its last "leader" event
}

// procEvent is an event from a process; ev is zero when the process's output
// ended.
type procEvent struct {
	p   *proc
	ev  lease.Event
	eof bool
}

// startProc starts the coord binary with args; id is its holder name,
// or "" to use its pid (the articles' programs).
func startProc(binary, id string, args ...string) (*proc, error) {
	cmd := exec.Command(binary, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, stdout: stdout, holder: id, exited: make(chan struct{})}
	if id == "" {
		p.holder = strconv.Itoa(cmd.Process.Pid)
	}
	return p, nil
}

// group runs trials against one lease with a fixed number of live
// contenders. It is not safe for concurrent use.
type group struct {
	spawn      func(i int) (*proc, error)
	contenders int
	rng        *rand.Rand
	phaseMax   time.Duration // random wait before each kill
	staggerMax time.Duration // random wait before each start
	timeout    time.Duration // for each wait
	progress   func(string, ...any)

	events  chan procEvent
	live    []*proc
	leader  *proc
	spawned int
}

func (g *group) start(ctx context.Context) error {
	if g.staggerMax > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(g.rng.Int64N(int64(g.staggerMax)))):
		}
	}
	g.spawned++
	p, err := g.spawn(g.spawned)
	if err != nil {
		return err
	}
	g.live = append(g.live, p)
	go func() {
		sc := bufio.NewScanner(p.stdout)
		for sc.Scan() {
			var ev lease.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				g.events <- procEvent{p: p, ev: ev}
			}
		}
		p.cmd.Wait()
		close(p.exited)
		g.events <- procEvent{p: p, eof: true}
	}()
	return nil
}

// handle updates the group's view with one event.
func (g *group) handle(pe procEvent) {
	switch {
	case pe.eof:
		g.live = slices.DeleteFunc(g.live, func(p *proc) bool { return p == pe.p })
		if g.leader == pe.p {
			g.leader = nil
		}
	case pe.ev.Event == lease.EventElected:
		g.leader = pe.p
	case pe.ev.Event == lease.EventLeader:
		pe.p.lastLeader = pe.ev.Holder
	case pe.ev.Event == lease.EventReleased || pe.ev.Event == lease.EventLost:
		if g.leader == pe.p {
			g.leader = nil
		}
	}
}

// next returns the next event, or an error on timeout or ctx.
func (g *group) next(ctx context.Context, deadline <-chan time.Time) (procEvent, error) {
	select {
	case pe := <-g.events:
		g.handle(pe)
		return pe, nil
	case <-deadline:
		return procEvent{}, errors.New("timed out")
	case <-ctx.Done():
		return procEvent{}, ctx.Err()
	}
}

// steady reports whether one leader is known and every other live process
// has seen it.
func (g *group) steady() bool {
	if g.leader == nil || len(g.live) < g.contenders {
		return false
	}
	for _, p := range g.live {
		if p != g.leader && p.lastLeader != g.leader.holder {
			return false
		}
	}
	return true
}

// run runs trials with sig and returns the gaps (and, for SIGTERM, the gaps
// measured from the old leader's release), and the number of failed trials.
func (g *group) run(ctx context.Context, sig syscall.Signal, trials int) (gaps, fromRelease []time.Duration, failed int) {
	g.events = make(chan procEvent, 4096)
	defer g.stopAll()
	for range g.contenders {
		if err := g.start(ctx); err != nil {
			g.progress("start: %v", err)
			return nil, nil, trials
		}
	}
	for trial := 0; trial < trials && ctx.Err() == nil; trial++ {
		gap, rel, err := g.trial(ctx, sig)
		if err != nil {
			failed++
			g.progress("trial %d: %v", trial+1, err)
			if failed > trials/10+2 {
				g.progress("too many failed trials; giving up")
				return gaps, fromRelease, failed + trials - trial - 1
			}
			continue
		}
		gaps = append(gaps, gap)
		if rel > 0 {
			fromRelease = append(fromRelease, rel)
		}
		if (trial+1)%20 == 0 {
			g.progress("%d/%d trials", trial+1, trials)
		}
	}
	return gaps, fromRelease, failed
}

// trial waits for a steady leader, signals it, measures the gap until
// another process is elected, and replaces the signalled process.
func (g *group) trial(ctx context.Context, sig syscall.Signal) (gap, fromRelease time.Duration, err error) {
	for len(g.live) < g.contenders {
		if err := g.start(ctx); err != nil {
			return 0, 0, err
		}
	}
	deadline := time.After(g.timeout)
	for !g.steady() {
		if _, err := g.next(ctx, deadline); err != nil {
			return 0, 0, fmt.Errorf("waiting for a leader all agree on: %w", err)
		}
	}
	if g.phaseMax > 0 {
		phase := time.After(time.Duration(g.rng.Int64N(int64(g.phaseMax))))
	wait:
		for {
			select {
			case pe := <-g.events:
				g.handle(pe)
			case <-phase:
				break wait
			case <-ctx.Done():
				return 0, 0, ctx.Err()
			}
		}
		if !g.steady() {
			return 0, 0, errors.New("leadership changed before the signal")
		}
	}
	old := g.leader
	t0 := eventlog.MonotonicNow()
	if err := old.cmd.Process.Signal(sig); err != nil {
		return 0, 0, err
	}
	// Each process's events come through a pipe of its own, so the new
	// leader's "elected" may be read before the "released" the old one
	// wrote earlier: after SIGTERM, read on until both are in (or the old
	// leader's output has ended).
	var released, elected int64
	oldDone := false
	deadline = time.After(g.timeout)
	for elected == 0 || (sig == syscall.SIGTERM && released == 0 && !oldDone) {
		pe, err := g.next(ctx, deadline)
		if err != nil {
			return 0, 0, fmt.Errorf("waiting for a new leader: %w", err)
		}
		switch {
		case pe.p == old && pe.eof:
			oldDone = true
		case pe.p == old && pe.ev.Event == lease.EventReleased:
			released = pe.ev.MonoNS
		case pe.p != old && pe.ev.Event == lease.EventElected && elected == 0:
			elected = pe.ev.MonoNS
		}
	}
	gap = time.Duration(elected - t0)
	if released != 0 {
		fromRelease = time.Duration(elected - released)
	}
	// Reap the old leader (a SIGTERMed one exits by itself) and forget it
	// now, so that the next trial starts its replacement.
	select {
	case <-old.exited:
	case <-time.After(10 * time.Second):
		old.cmd.Process.Kill()
		<-old.exited
	}
	g.handle(procEvent{p: old, eof: true})
	return gap, fromRelease, nil
}

// stopAll kills every live process and waits for them.
func (g *group) stopAll() {
	for _, p := range g.live {
		p.cmd.Process.Kill()
	}
	for _, p := range g.live {
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
		}
	}
}

// startFrozen starts one more `coord elect` that stops itself (SIGSTOP)
// inside its first compare-and-swap, through the file store's test hook
// (COORD_FILE_TEST_STOP), and waits until it is stopped. stop kills it.
// With a store that has no such hook it never stops: an error wrapping
// ErrInvalid.
func startFrozen(binary, store, name string, ttl time.Duration) (stop func(), err error) {
	cmd := exec.Command(binary, "elect", "--store", store, "--name", name, "--id", "frozen", "--json", "--ttl", ttl.String())
	cmd.Env = append(os.Environ(), "COORD_FILE_TEST_STOP=before-commit")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
	stopped := make(chan error, 1)
	go func() { stopped <- waitStopped(cmd.Process.Pid) }()
	select {
	case err := <-stopped:
		if err != nil {
			stop()
			return nil, fmt.Errorf("failover: freeze one: %w", err)
		}
		return stop, nil
	case <-time.After(3*ttl + 30*time.Second):
		stop()
		return nil, fmt.Errorf("%w: freeze one: the extra contender never stopped inside its compare-and-swap (only the file store has that test hook)", ErrInvalid)
	}
}

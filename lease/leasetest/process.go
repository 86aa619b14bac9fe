package leasetest

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"coord/lease"
	"coord/lease/eventlog"
)

// BuildCoord builds the coord command into dir and returns the binary's
// path. Call it once from TestMain (the build takes seconds) and pass the
// path to RunProcesses.
func BuildCoord(dir string) (string, error) {
	bin := filepath.Join(dir, "coord")
	out, err := exec.Command("go", "build", "-o", bin, "coord/cmd/coord").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("leasetest: go build coord/cmd/coord: %v\n%s", err, out)
	}
	return bin, nil
}

// ProcessOptions tune RunProcesses.
type ProcessOptions struct {
	// TTL passed to `coord elect --ttl`; the other timings scale with it.
	// Default 1s.
	TTL time.Duration
	// Participants is the number of coord elect processes. Default 3.
	Participants int
}

// RunProcesses runs the checks that need real OS processes against the
// store at storeURL, with the coord binary at bin (see BuildCoord): several
// `coord elect --store storeURL --json` processes compete for a fresh lease
// name, and
//   - KillLeader: the leader gets SIGKILL; another is elected with a
//     greater token (after at most the TTL; the file backend notices the
//     death at once);
//   - TermLeader: the leader gets SIGTERM; it releases (event "released",
//     stamped before any other participant's election), exits 0, and
//     another is elected with a greater token;
//   - StopLeader: the leader gets SIGSTOP; another is elected after the
//     TTL; on SIGCONT the old leader reports "lost" and never "renewed"
//     again.
func RunProcesses(t *testing.T, bin, storeURL string, opts ProcessOptions) {
	if opts.TTL <= 0 {
		opts.TTL = time.Second
	}
	if opts.Participants < 2 {
		opts.Participants = 3
	}
	timeout := 10*opts.TTL + 20*time.Second
	start := func(t *testing.T) (*Group, lease.Event) {
		g := StartGroup(t, bin, storeURL, NewName(), opts.Participants, "--ttl", opts.TTL.String())
		leader := g.WaitEvent(t, timeout, "a first leader", func(e lease.Event) bool { return e.Event == lease.EventElected })
		return g, leader
	}
	t.Run("KillLeader", func(t *testing.T) {
		g, leader := start(t)
		g.Signal(t, leader.ID, syscall.SIGKILL)
		g.WaitEvent(t, timeout, "a new leader after SIGKILL", func(e lease.Event) bool {
			return e.Event == lease.EventElected && e.ID != leader.ID && e.Token > leader.Token
		})
	})
	t.Run("TermLeader", func(t *testing.T) {
		g, leader := start(t)
		g.Signal(t, leader.ID, syscall.SIGTERM)
		released := g.WaitEvent(t, timeout, "the leader's release", func(e lease.Event) bool {
			return e.Event == lease.EventReleased && e.ID == leader.ID
		})
		next := g.WaitEvent(t, timeout, "a new leader after SIGTERM", func(e lease.Event) bool {
			return e.Event == lease.EventElected && e.ID != leader.ID && e.Token > leader.Token
		})
		// The old leader reports before it hands the lease back, so that
		// a merged timeline never shows two leaders.
		if next.MonoNS < released.MonoNS {
			t.Errorf("%s was elected at %d ns, before %s reported its release at %d ns", next.ID, next.MonoNS, leader.ID, released.MonoNS)
		}
		if code := g.Wait(t, leader.ID, timeout); code != 0 {
			t.Errorf("leader exited %d after SIGTERM, want 0", code)
		}
	})
	t.Run("StopLeader", func(t *testing.T) {
		g, leader := start(t)
		// Stop the leader just after a renewal it reports, not at a moment
		// the test happens to read "elected": a process stopped inside a
		// store call may hold what every other participant needs (SQLite's
		// write lock is a POSIX lock the stopped process keeps; see
		// docs/backends.md), which is a limit of that store, not the
		// takeover this test measures. Just after a renewal, the next store
		// call is a third of a TTL away.
		var seen int64
		for _, e := range g.Events() {
			seen = max(seen, e.MonoNS)
		}
		g.WaitEvent(t, timeout, "a renewal by the leader", func(e lease.Event) bool {
			return e.Event == lease.EventRenewed && e.ID == leader.ID && e.MonoNS > seen
		})
		g.Signal(t, leader.ID, syscall.SIGSTOP)
		next := g.WaitEvent(t, timeout, "a new leader while the old one is stopped", func(e lease.Event) bool {
			return e.Event == lease.EventElected && e.ID != leader.ID
		})
		if next.Token <= leader.Token {
			t.Errorf("new leader's token %d, want > %d", next.Token, leader.Token)
		}
		g.Signal(t, leader.ID, syscall.SIGCONT)
		g.WaitEvent(t, timeout, "the stopped leader to report lost", func(e lease.Event) bool {
			return e.Event == lease.EventLost && e.ID == leader.ID
		})
		for _, e := range g.Events() {
			if e.ID == leader.ID && e.Event == lease.EventRenewed && e.MonoNS > next.MonoNS {
				t.Errorf("the stopped leader renewed token %d after %s was elected with token %d", e.Token, next.ID, next.Token)
			}
		}
	})
}

// Group is a set of `coord elect --json` processes competing for one lease.
// Its methods are safe for concurrent use.
type Group struct {
	bin, storeURL, name string
	extra               []string

	mu     sync.Mutex
	procs  map[string]*exec.Cmd
	events []lease.Event
	stderr map[string]*bytes.Buffer
	waited map[string]int
	killed map[string]int64 // CLOCK_MONOTONIC ns just before SIGKILL was sent
	cond   *sync.Cond
}

// StartGroup starts n `coord elect` processes with ids p1..pn against
// storeURL and lease name, with extra arguments appended. They are killed
// when the test ends; their stderr is logged if it fails.
func StartGroup(t testing.TB, bin, storeURL, name string, n int, extra ...string) *Group {
	t.Helper()
	g := &Group{bin: bin, storeURL: storeURL, name: name, extra: extra,
		procs: map[string]*exec.Cmd{}, stderr: map[string]*bytes.Buffer{}, waited: map[string]int{}, killed: map[string]int64{}}
	g.cond = sync.NewCond(&g.mu)
	for i := 1; i <= n; i++ {
		g.Add(t, "p"+strconv.Itoa(i))
	}
	t.Cleanup(func() {
		g.mu.Lock()
		procs := maps.Clone(g.procs)
		g.mu.Unlock()
		for id, cmd := range procs {
			cmd.Process.Signal(syscall.SIGCONT)
			cmd.Process.Kill()
			g.Wait(t, id, 10*time.Second)
		}
		if t.Failed() {
			g.mu.Lock()
			defer g.mu.Unlock()
			for id, buf := range g.stderr {
				t.Logf("stderr of %s:\n%s", id, buf.String())
			}
			for _, e := range g.events {
				t.Logf("event %s", mustJSON(e))
			}
		}
	})
	return g
}

// Add starts one more participant, with id, the Group's arguments and env
// added to its environment (NAME=value), and returns its process id.
func (g *Group) Add(t testing.TB, id string, env ...string) int {
	t.Helper()
	args := append([]string{"elect", "--store", g.storeURL, "--name", g.name, "--id", id, "--json"}, g.extra...)
	cmd := exec.Command(g.bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &syncWriter{mu: &g.mu, w: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", g.bin, err)
	}
	g.mu.Lock()
	g.procs[id] = cmd
	g.stderr[id] = &stderr
	g.mu.Unlock()
	go g.read(id, cmd, stdout)
	return cmd.Process.Pid
}

// syncWriter serialises writes under the Group's mutex.
type syncWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// read collects a process's JSON events until its stdout closes, then
// records its exit status.
func (g *Group) read(id string, cmd *exec.Cmd, stdout interface{ Read([]byte) (int, error) }) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var e lease.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue
		}
		g.mu.Lock()
		g.events = append(g.events, e)
		g.cond.Broadcast()
		g.mu.Unlock()
	}
	err := cmd.Wait() // not g.procs[id]: StartGroup may still be filling the map
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	g.mu.Lock()
	g.waited[id] = code
	g.cond.Broadcast()
	g.mu.Unlock()
}

// Events returns the events seen so far, in arrival order.
func (g *Group) Events() []lease.Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]lease.Event(nil), g.events...)
}

// WaitEvent waits until an event satisfying cond has arrived and returns
// the first such event; it fails the test after timeout.
func (g *Group) WaitEvent(t testing.TB, timeout time.Duration, what string, cond func(lease.Event) bool) lease.Event {
	t.Helper()
	var found *lease.Event
	g.waitUntil(timeout, func() bool {
		for i := range g.events {
			if cond(g.events[i]) {
				found = &g.events[i]
				return true
			}
		}
		return false
	})
	if found == nil {
		t.Fatalf("no event for %s within %v", what, timeout)
	}
	return *found
}

// Wait waits for process id to exit and returns its exit code (-1 when
// killed by a signal); it fails the test after timeout.
func (g *Group) Wait(t testing.TB, id string, timeout time.Duration) int {
	t.Helper()
	code := 0
	ok := g.waitUntil(timeout, func() bool {
		c, done := g.waited[id]
		code = c
		return done
	})
	if !ok {
		t.Errorf("process %s did not exit within %v", id, timeout)
	}
	return code
}

// waitUntil waits on the condition variable until check (called with g.mu
// held) returns true, or timeout; it reports whether check succeeded.
func (g *Group) waitUntil(timeout time.Duration, check func() bool) bool {
	timer := time.AfterFunc(timeout, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	g.mu.Lock()
	defer g.mu.Unlock()
	for !check() {
		if !time.Now().Before(deadline) {
			return false
		}
		g.cond.Wait()
	}
	return true
}

// Signal sends sig to process id. For SIGKILL it notes the time first:
// CheckOneLeader ends the process's leadership there.
func (g *Group) Signal(t testing.TB, id string, sig syscall.Signal) {
	t.Helper()
	g.mu.Lock()
	cmd, ok := g.procs[id]
	if ok && sig == syscall.SIGKILL {
		g.killed[id] = eventlog.MonotonicNow()
	}
	g.mu.Unlock()
	if !ok {
		t.Fatalf("no process %q", id)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to %s: %v", sig, id, err)
	}
}

// Record adds events from elsewhere (a participant in the test's own
// process, say) to the Group's timeline.
func (g *Group) Record(events ...lease.Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.events = append(g.events, events...)
	g.cond.Broadcast()
}

// CheckOneLeader checks the Group's merged timeline (events ordered by
// mono_ns, which every process of one boot shares): no two participants
// lead at once, and every election's token is greater than every token
// elected before it. A participant leads from its elected event until its
// lost or released event, or until it was sent SIGKILL, or to the end of
// the timeline. It reports every overlap and returns how many elections
// it checked.
func (g *Group) CheckOneLeader(t testing.TB) int {
	t.Helper()
	g.mu.Lock()
	events := slices.Clone(g.events)
	killed := maps.Clone(g.killed)
	g.mu.Unlock()
	slices.SortStableFunc(events, func(a, b lease.Event) int { return cmp.Compare(a.MonoNS, b.MonoNS) })
	type term struct {
		id         string
		token      uint64
		start, end int64
	}
	var terms []*term
	open := map[string]*term{}
	var maxToken uint64
	for _, e := range events {
		switch e.Event {
		case lease.EventElected:
			if e.Token <= maxToken {
				t.Errorf("%s was elected with token %d at %d ns, not above the %d elected before", e.ID, e.Token, e.MonoNS, maxToken)
			}
			maxToken = max(maxToken, e.Token)
			tm := &term{id: e.ID, token: e.Token, start: e.MonoNS, end: math.MaxInt64}
			if k, ok := killed[e.ID]; ok && k > e.MonoNS {
				tm.end = k
			}
			open[e.ID] = tm
			terms = append(terms, tm)
		case lease.EventLost, lease.EventReleased:
			if tm := open[e.ID]; tm != nil {
				tm.end = min(tm.end, e.MonoNS)
				delete(open, e.ID)
			}
		}
	}
	for i, a := range terms {
		for _, b := range terms[i+1:] {
			if a.id != b.id && a.start < b.end && b.start < a.end {
				t.Errorf("two leaders: %s (token %d) from %d ns and %s (token %d) from %d ns overlap by %v",
					a.id, a.token, a.start, b.id, b.token, b.start, time.Duration(min(a.end, b.end)-max(a.start, b.start)))
			}
		}
	}
	return len(terms)
}

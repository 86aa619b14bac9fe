package articles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"coord/lease"
	"coord/lease/eventlog"
)

// Events of the articles' programs beyond lease's own names (see the
// package doc).
const (
	EventExpired    = "expired"
	EventLostRace   = "lost-race"
	EventUnreadable = "unreadable"
	EventNotElected = "not-elected"
)

// The articles' timings.
const (
	LeaseDuration = 9 * time.Second // LEASE_DURATION
	RenewInterval = 3 * time.Second // RENEW_INTERVAL
	WatchInterval = 3 * time.Second // WATCH_INTERVAL
)

// Output is where a program reports: the articles' readable lines, and
// optionally JSON events.
type Output struct {
	// Lines receives the articles' log lines; nil discards them.
	Lines io.Writer
	// Events receives one JSON event per line; nil writes none.
	Events *eventlog.Writer
}

// logf prints one of the articles' lines, stamped as the original did.
func (o Output) logf(format string, args ...any) {
	if o.Lines == nil {
		return
	}
	fmt.Fprintf(o.Lines, "%s [Process: %d] %s\n", time.Now().Format(time.RFC3339), os.Getpid(), fmt.Sprintf(format, args...))
}

func (o Output) event(ev lease.Event) {
	if o.Events != nil {
		o.Events.Write(ev)
	}
}

// OneShotConfig configures StatCreate and Exclusive.
type OneShotConfig struct {
	Path string
	// At, if not zero, is when to look at the lock file, so that the
	// processes of one trial race for it at the same instant.
	At time.Time
	// Hold is how long to stay alive after deciding (ctx ends it sooner).
	Hold time.Duration
	Out  Output
}

// StatCreate is the articles' first leader: stat the lock file, and create
// it if it does not exist. It reports whether this process declared itself
// leader. The gap between the stat and the create is the bug.
func StatCreate(ctx context.Context, cfg OneShotConfig) (bool, error) {
	waitUntil(ctx, cfg.At)
	pid := os.Getpid()
	leader := false
	if _, err := os.Stat(cfg.Path); os.IsNotExist(err) {
		f, _ := os.OpenFile(cfg.Path, os.O_CREATE|os.O_WRONLY, 0o644)
		if f != nil {
			f.Close()
		}
		fmt.Fprintf(linesOrDiscard(cfg.Out), "[%d] I AM THE LEADER\n", pid)
		leader = true
	}
	finishOneShot(ctx, cfg, leader)
	return leader, nil
}

// Exclusive is the articles' second leader: create the lock file with
// O_CREATE|O_EXCL, which fails if it exists. Exactly one process wins; a
// dead winner's file stays forever.
func Exclusive(ctx context.Context, cfg OneShotConfig) (bool, error) {
	waitUntil(ctx, cfg.At)
	pid := os.Getpid()
	f, err := os.OpenFile(cfg.Path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	leader := err == nil
	if leader {
		// we created it, so we are the leader
		f.Close()
		fmt.Fprintf(linesOrDiscard(cfg.Out), "[%d] I AM THE LEADER\n", pid)
	} else if !errors.Is(err, os.ErrExist) {
		return false, fmt.Errorf("articles: create %s: %w", cfg.Path, err)
	}
	finishOneShot(ctx, cfg, leader)
	return leader, nil
}

func linesOrDiscard(o Output) io.Writer {
	if o.Lines == nil {
		return io.Discard
	}
	return o.Lines
}

// finishOneShot reports the decision and holds for cfg.Hold.
func finishOneShot(ctx context.Context, cfg OneShotConfig, leader bool) {
	self := strconv.Itoa(os.Getpid())
	if leader {
		cfg.Out.event(lease.Event{Event: lease.EventElected, Holder: self})
	} else {
		cfg.Out.event(lease.Event{Event: EventNotElected})
	}
	if cfg.Hold > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(cfg.Hold):
		}
	}
}

// waitUntil sleeps until t (if it is in the future) or ctx ends.
func waitUntil(ctx context.Context, t time.Time) {
	if d := time.Until(t); !t.IsZero() && d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

// LeaseConfig configures Lease. Zero durations mean the articles' values.
type LeaseConfig struct {
	Path          string
	LeaseDuration time.Duration // LEASE_DURATION, default 9 s
	RenewInterval time.Duration // RENEW_INTERVAL, default 3 s
	WatchInterval time.Duration // WATCH_INTERVAL, default 3 s
	Out           Output
}

// LeaseContent is the lock file's JSON, as the articles wrote it.
type LeaseContent struct {
	ProcessID  int   `json:"processId"`
	LeaseUntil int64 `json:"leaseUntil"` // Unix seconds
}

// leaseProgram is the articles' lease program's state. role is read by the
// shutdown path; the original read it from a signal goroutine without a
// lock (a data race the articles did not discuss), here it is guarded so
// that the race detector stays quiet about a bug nobody is studying.
type leaseProgram struct {
	cfg      LeaseConfig
	pid      int
	out      Output
	mu       sync.Mutex
	role     string // "renewal" when leader, "watch" otherwise
	lastSeen int    // last holder reported through a "leader" event
}

// Lease runs the articles' lease program on cfg.Path until ctx ends, which
// plays the part of SIGTERM/SIGINT: the leader removes the lock file (without
// checking that it is still its own) and the program returns.
func Lease(ctx context.Context, cfg LeaseConfig) error {
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = LeaseDuration
	}
	if cfg.RenewInterval <= 0 {
		cfg.RenewInterval = RenewInterval
	}
	if cfg.WatchInterval <= 0 {
		cfg.WatchInterval = WatchInterval
	}
	p := &leaseProgram{cfg: cfg, pid: os.Getpid(), out: cfg.Out, role: "watch"}
	if p.tryAcquireLease() {
		p.setRole("renewal")
	}
	for {
		interval := cfg.WatchInterval
		if p.getRole() == "renewal" {
			interval = cfg.RenewInterval
		}
		select {
		case <-ctx.Done():
			p.shutdown()
			return nil
		case <-time.After(interval):
		}
		if p.getRole() == "renewal" {
			p.renewLease()
		} else {
			p.watchLease()
		}
	}
}

func (p *leaseProgram) setRole(r string) {
	p.mu.Lock()
	p.role = r
	p.mu.Unlock()
}

func (p *leaseProgram) getRole() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.role
}

func (p *leaseProgram) self() string { return strconv.Itoa(p.pid) }

// leaseUntil returns now + LEASE_DURATION in whole Unix seconds.
func (p *leaseProgram) leaseUntil() int64 {
	return time.Now().Add(p.cfg.LeaseDuration).Unix()
}

func clock(unix int64) string { return time.Unix(unix, 0).Format("15:04:05") }

// tryAcquireLease is the articles' two-step acquisition: O_EXCL create
// (step 1), close, then write the content (step 2). A crash between the
// steps leaves an empty lock file.
func (p *leaseProgram) tryAcquireLease() bool {
	f, err := os.OpenFile(p.cfg.Path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644) // step 1
	if err != nil {
		return false
	}
	f.Close()
	data := LeaseContent{ProcessID: p.pid, LeaseUntil: p.leaseUntil()}
	if err := updateLeaseContent(p.cfg.Path, &data); err != nil { // step 2
		return false
	}
	p.out.logf("[LEADER] Acquired lease at %s, valid until %s", time.Now().Format("15:04:05"), clock(data.LeaseUntil))
	p.out.event(lease.Event{Event: lease.EventElected, Holder: p.self(), Expiry: time.Unix(data.LeaseUntil, 0), Detail: "acquired"})
	return true
}

// updateLeaseContent rewrites the lock file in place: truncate, then write.
// A reader in between sees an empty or partial file.
func updateLeaseContent(path string, data *LeaseContent) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func readLeaseContent(path string) (*LeaseContent, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c LeaseContent
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// renewLease pushes the expiry out without checking who holds the lease: a
// leader that was paused past its lease overwrites its successor's.
func (p *leaseProgram) renewLease() {
	data := LeaseContent{ProcessID: p.pid, LeaseUntil: p.leaseUntil()}
	if err := updateLeaseContent(p.cfg.Path, &data); err != nil {
		p.out.logf("[LEADER] Failed to renew lease: %v", err)
		return
	}
	p.out.logf("[LEADER] Lease renewed, valid until %s", clock(data.LeaseUntil))
	p.out.event(lease.Event{Event: lease.EventRenewed, Holder: p.self(), Expiry: time.Unix(data.LeaseUntil, 0)})
}

// watchLease is one watcher tick.
func (p *leaseProgram) watchLease() {
	content, err := readLeaseContent(p.cfg.Path)
	if err != nil {
		// An unreadable lease looks like an opportunity; with an empty
		// file present, O_EXCL refuses, forever.
		if p.tryAcquireLease() {
			p.setRole("renewal")
			return
		}
		p.out.logf("[WATCHER] Could not read lease file, will retry")
		p.out.event(lease.Event{Event: EventUnreadable, Error: err.Error()})
		return
	}
	holder := strconv.Itoa(content.ProcessID)
	now := time.Now()
	if content.LeaseUntil < now.Unix() { // whole seconds, strict: the articles' off-by-one
		p.out.logf("[WATCHER] Lease held by %d expired at %s, attempting takeover", content.ProcessID, clock(content.LeaseUntil))
		p.out.event(lease.Event{Event: EventExpired, Holder: holder, Expiry: time.Unix(content.LeaseUntil, 0)})
		p.takeover()
		return
	}
	p.out.logf("[WATCHER] Lease held by %d, valid until %s", content.ProcessID, clock(content.LeaseUntil))
	if content.ProcessID != p.lastSeen {
		p.lastSeen = content.ProcessID
		p.out.event(lease.Event{Event: lease.EventLeader, Holder: holder, Expiry: time.Unix(content.LeaseUntil, 0)})
	}
}

// takeover is remove-then-create: a slow watcher can remove the file a fast
// one has just created, and both lead.
func (p *leaseProgram) takeover() {
	os.Remove(p.cfg.Path)
	f, err := os.OpenFile(p.cfg.Path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		p.out.logf("[WATCHER] Lost the takeover race, continuing to watch")
		p.out.event(lease.Event{Event: EventLostRace})
		return
	}
	f.Close()
	data := LeaseContent{ProcessID: p.pid, LeaseUntil: p.leaseUntil()}
	if err := updateLeaseContent(p.cfg.Path, &data); err != nil {
		return
	}
	p.setRole("renewal")
	p.out.logf("[WATCHER] Takeover successful, now leader until %s", clock(data.LeaseUntil))
	p.out.event(lease.Event{Event: lease.EventElected, Holder: p.self(), Expiry: time.Unix(data.LeaseUntil, 0), Detail: "takeover"})
}

// shutdown is the articles' graceful SIGTERM handler: a leader removes the
// lock file, whoever's it is by now.
func (p *leaseProgram) shutdown() {
	p.out.logf("Received shutdown signal, releasing lease")
	if p.getRole() == "renewal" {
		os.Remove(p.cfg.Path)
		p.out.logf("Lease released")
		p.out.event(lease.Event{Event: lease.EventReleased, Holder: p.self()})
	}
}

package articles

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"coord/lease"
	"coord/lease/eventlog"
)

// syncBuffer collects output from a program running on another goroutine.
type syncBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{} // signalled (coalesced) after each write
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{wrote: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case b.wrote <- struct{}{}:
	default:
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// events decodes the JSON events written so far.
func (b *syncBuffer) events(t *testing.T) []lease.Event {
	t.Helper()
	var evs []lease.Event
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var ev lease.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("bad event line %q: %v", line, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

func TestExclusiveOneWinnerAndStatCreate(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	path := filepath.Join(dir, "excl.lock")
	first, err := Exclusive(ctx, OneShotConfig{Path: path})
	if err != nil || !first {
		t.Fatalf("first Exclusive = %v, %v; want leader", first, err)
	}
	second, err := Exclusive(ctx, OneShotConfig{Path: path})
	if err != nil || second {
		t.Fatalf("second Exclusive = %v, %v; want not leader", second, err)
	}
	var lines bytes.Buffer
	leader, err := StatCreate(ctx, OneShotConfig{Path: filepath.Join(dir, "stat.lock"), Out: Output{Lines: &lines}})
	if err != nil || !leader || !strings.Contains(lines.String(), "I AM THE LEADER") {
		t.Fatalf("StatCreate on a fresh path = %v, %v, %q", leader, err, lines.String())
	}
}

// runLease runs the lease program with short intervals until stop is
// closed, collecting its events.
func runLease(t *testing.T, path string) (stop func(), events *syncBuffer, lines *syncBuffer) {
	events, lines = newSyncBuffer(), newSyncBuffer()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Lease(ctx, LeaseConfig{Path: path, LeaseDuration: 2 * time.Second, RenewInterval: 20 * time.Millisecond,
			WatchInterval: 20 * time.Millisecond, Out: Output{Lines: lines, Events: eventlog.NewWriter(events, "test")}})
	}()
	return func() { cancel(); <-done }, events, lines
}

// waitEvents waits (bounded) until the program has written n events.
func waitEvents(t *testing.T, b *syncBuffer, n int) []lease.Event {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		if evs := b.events(t); len(evs) >= n {
			return evs
		}
		select {
		case <-b.wrote:
		case <-timeout:
			t.Fatalf("fewer than %d events within 30s: %s", n, b.String())
		}
	}
}

func TestLeaseAcquiresRenewsAndReleases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leader.lock")
	stop, events, lines := runLease(t, path)
	evs := waitEvents(t, events, 3)
	if evs[0].Event != lease.EventElected || evs[1].Event != lease.EventRenewed {
		t.Errorf("events %v, want elected then renewed", evs)
	}
	stop()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("lock file still there after the graceful shutdown: %v", err)
	}
	if !strings.Contains(lines.String(), "Lease released") {
		t.Errorf("no release line in %q", lines.String())
	}
}

// The bug the articles found: a zero-byte lock file wedges the program.
func TestLeaseWedgedByEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leader.lock")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stop, events, lines := runLease(t, path)
	defer stop()
	for _, ev := range waitEvents(t, events, 5) {
		if ev.Event != EventUnreadable {
			t.Fatalf("event %+v on an empty lock file, want only %q", ev, EventUnreadable)
		}
	}
	if !strings.Contains(lines.String(), "Could not read lease file, will retry") {
		t.Errorf("no retry line in %q", lines.String())
	}
}

// The renew does not check who holds the lease: it overwrites whatever is
// in the lock file.
func TestLeaseRenewOverwritesAnotherHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leader.lock")
	stop, events, _ := runLease(t, path)
	defer stop()
	waitEvents(t, events, 1)
	other, _ := json.Marshal(LeaseContent{ProcessID: 1, LeaseUntil: time.Now().Add(time.Hour).Unix()})
	if err := os.WriteFile(path, other, 0o644); err != nil {
		t.Fatal(err)
	}
	// The next renewal may have written the file before us and report
	// after we count; the one after it started after our write.
	n := len(events.events(t))
	waitEvents(t, events, n+2)
	c, err := readLeaseContent(path)
	if err != nil || c.ProcessID != os.Getpid() {
		t.Errorf("after a renew the lock file holds %+v, %v; want our pid %d (overwritten)", c, err, os.Getpid())
	}
}

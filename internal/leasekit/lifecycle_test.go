package leasekit

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"coord/lease"
)

// waitMax bounds every wait in these tests; reaching it is a failure.
const waitMax = 10 * time.Second

// Close cancels a running watch's context and returns only after the
// watch has returned; afterwards Check and Go say ErrClosed, and Go runs
// nothing.
func TestLifecycleCloseEndsWatches(t *testing.T) {
	var l Lifecycle
	if l.Check("p") != nil {
		t.Fatal("zero Lifecycle not open")
	}
	started, returned := make(chan struct{}), make(chan struct{})
	err := l.Go(context.Background(), "p", func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		close(returned)
	})
	if err != nil {
		t.Fatalf("Go: %v", err)
	}
	select {
	case <-started:
	case <-time.After(waitMax):
		t.Fatal("watch never started")
	}

	if !l.Close() {
		t.Fatal("first Close reported closed already")
	}
	select {
	case <-returned:
	default:
		t.Fatal("Close returned before the watch did")
	}
	if l.Close() {
		t.Fatal("second Close reported closing")
	}

	err = l.Check("lease/x")
	if !errors.Is(err, lease.ErrClosed) {
		t.Fatalf("Check after Close: want ErrClosed, got %v", err)
	}
	if got, want := err.Error(), "lease/x: lease: backend closed"; got != want {
		t.Fatalf("Check's error: got %q, want %q", got, want)
	}
	ran := false
	err = l.Go(context.Background(), "lease/x", func(context.Context) { ran = true })
	if !errors.Is(err, lease.ErrClosed) {
		t.Fatalf("Go after Close: want ErrClosed, got %v", err)
	}
	if ran {
		t.Fatal("Go after Close ran the watch")
	}
}

// A watch ends with its caller's context, and the Lifecycle stays open.
func TestLifecycleWatchEndsWithItsContext(t *testing.T) {
	var l Lifecycle
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	err := l.Go(ctx, "p", func(ctx context.Context) {
		<-ctx.Done()
		close(returned)
	})
	if err != nil {
		t.Fatalf("Go: %v", err)
	}
	cancel()
	select {
	case <-returned:
	case <-time.After(waitMax):
		t.Fatal("watch did not end with its context")
	}
	if l.Check("p") != nil {
		t.Fatal("Lifecycle closed by a watch's context")
	}
	if !l.Close() {
		t.Fatal("Close of an open Lifecycle")
	}
}

// A Lifecycle closed before any watch closes; with watches starting
// concurrently, every watch that Go accepted has returned when Close
// does, and Go accepts none after.
func TestLifecycleConcurrentGoAndClose(t *testing.T) {
	var idle Lifecycle
	if !idle.Close() {
		t.Fatal("Close of a zero Lifecycle")
	}

	var l Lifecycle
	const watches = 50
	var returned atomic.Int32
	results := make(chan error, watches)
	for range watches {
		go func() {
			results <- l.Go(context.Background(), "p", func(ctx context.Context) {
				<-ctx.Done()
				returned.Add(1)
			})
		}()
	}
	l.Close()
	returnedByClose := returned.Load()
	accepted := int32(0)
	for range watches {
		select {
		case err := <-results:
			if !(err == nil || errors.Is(err, lease.ErrClosed)) {
				t.Fatalf("Go: %v", err)
			}
			if err == nil {
				accepted++
			}
		case <-time.After(waitMax):
			t.Fatal("Go did not return")
		}
	}
	if returnedByClose != accepted {
		t.Fatalf("watches returned when Close did: %d, want all %d that Go accepted", returnedByClose, accepted)
	}
	if got := returned.Load(); got != accepted {
		t.Fatalf("watches run in all: %d, want the %d that Go accepted", got, accepted)
	}
}

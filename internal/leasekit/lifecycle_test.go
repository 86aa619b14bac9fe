package leasekit

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"coord/internal/assert"
	"coord/lease"
)

// waitMax bounds every wait in these tests; reaching it is a failure.
const waitMax = 10 * time.Second

// Close cancels a running watch's context and returns only after the
// watch has returned; afterwards Check and Go say ErrClosed, and Go runs
// nothing.
func TestLifecycleCloseEndsWatches(t *testing.T) {
	var l Lifecycle
	assert.That(l.Check("p") == nil, "zero Lifecycle not open")
	started, returned := make(chan struct{}), make(chan struct{})
	err := l.Go(context.Background(), "p", func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		close(returned)
	})
	assert.That(err == nil, "Go: %v", err)
	select {
	case <-started:
	case <-time.After(waitMax):
		t.Fatal("watch never started")
	}

	assert.That(l.Close(), "first Close reported closed already")
	select {
	case <-returned:
	default:
		t.Fatal("Close returned before the watch did")
	}
	assert.That(!l.Close(), "second Close reported closing")

	err = l.Check("lease/x")
	assert.That(errors.Is(err, lease.ErrClosed), "Check after Close: want ErrClosed, got %v", err)
	assert.Equal(err.Error(), "lease/x: lease: backend closed", "Check's error")
	ran := false
	err = l.Go(context.Background(), "lease/x", func(context.Context) { ran = true })
	assert.That(errors.Is(err, lease.ErrClosed), "Go after Close: want ErrClosed, got %v", err)
	assert.That(!ran, "Go after Close ran the watch")
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
	assert.That(err == nil, "Go: %v", err)
	cancel()
	select {
	case <-returned:
	case <-time.After(waitMax):
		t.Fatal("watch did not end with its context")
	}
	assert.That(l.Check("p") == nil, "Lifecycle closed by a watch's context")
	assert.That(l.Close(), "Close of an open Lifecycle")
}

// A Lifecycle closed before any watch closes; with watches starting
// concurrently, every watch that Go accepted has returned when Close
// does, and Go accepts none after.
func TestLifecycleConcurrentGoAndClose(t *testing.T) {
	var idle Lifecycle
	assert.That(idle.Close(), "Close of a zero Lifecycle")

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
			assert.That(err == nil || errors.Is(err, lease.ErrClosed), "Go: %v", err)
			if err == nil {
				accepted++
			}
		case <-time.After(waitMax):
			t.Fatal("Go did not return")
		}
	}
	assert.Equal(returnedByClose, accepted, "watches returned when Close did, of those Go accepted")
	assert.Equal(returned.Load(), accepted, "watches run in all, of those Go accepted")
}

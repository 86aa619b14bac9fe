package server

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestReadRoundsAnswerOnlyFromALaterRound holds a round open while more
// callers arrive: they must not be answered by it (it started before them),
// and they share the next round.
func TestReadRoundsAnswerOnlyFromALaterRound(t *testing.T) {
	started := make(chan int, 10)
	release := make(chan error)
	rounds := 0
	r := &readRounds{readIndex: func(context.Context) error {
		rounds++
		started <- rounds
		return <-release
	}}
	answered := make(chan string, 10)
	call := func(name string) {
		go func() {
			if err := r.wait(context.Background()); err != nil {
				answered <- name + ": " + err.Error()
				return
			}
			answered <- name
		}()
	}
	call("a")
	if n := <-started; n != 1 {
		t.Fatalf("round %d started, want 1", n)
	}
	call("b")
	call("c")
	// b and c must be registered before round 1 ends: poll the
	// registration (the test's own setup, not a state it checks).
	for {
		r.mu.Lock()
		waiting := r.pending != nil && r.pending.callers == 2
		r.mu.Unlock()
		if waiting {
			break
		}
		time.Sleep(time.Millisecond)
	}
	release <- nil
	if got := <-answered; got != "a" {
		t.Fatalf("round 1 answered %q, want a", got)
	}
	select {
	case got := <-answered:
		t.Fatalf("%s was answered by a round that started before it arrived", got)
	case n := <-started:
		if n != 2 {
			t.Fatalf("round %d started, want 2", n)
		}
	}
	release <- errors.New("not leader")
	for range 2 {
		if got := <-answered; got != "b: not leader" && got != "c: not leader" {
			t.Fatalf("round 2 answered %q", got)
		}
	}
	if rounds != 2 {
		t.Fatalf("%d rounds for three callers, want 2", rounds)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	go func() { <-started; release <- nil }()
	if err := r.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a caller whose context ended: %v", err)
	}
}

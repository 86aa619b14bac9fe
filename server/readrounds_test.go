package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
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

// TestRenewalRoundsAreSpacedAndStartAfterTheirCallers runs rounds with a
// gap (Node.renewals) on a fake clock (testing/synctest), under callers
// arriving every 100 µs for 200 ms, then one after a pause: every caller
// is answered by a round that started after it arrived (the safety of a
// renewal answered by the leader), two rounds never start closer than the
// gap, also when the goroutine running them ended in between, and the
// rounds are about one per gap, not one per caller.
func TestRenewalRoundsAreSpacedAndStartAfterTheirCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const gap, roundTrip = 20 * time.Millisecond, 3 * time.Millisecond
		type span struct{ start, end time.Time }
		var mu sync.Mutex
		var rounds []span
		r := &readRounds{minGap: gap, readIndex: func(context.Context) error {
			start := time.Now()
			time.Sleep(roundTrip)
			mu.Lock()
			rounds = append(rounds, span{start, time.Now()})
			mu.Unlock()
			return nil
		}}
		type answer struct{ arrived, answered time.Time }
		var answers []answer
		var wg sync.WaitGroup
		call := func() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				arrived := time.Now()
				if err := r.wait(context.Background()); err != nil {
					t.Errorf("wait: %v", err)
					return
				}
				mu.Lock()
				answers = append(answers, answer{arrived, time.Now()})
				mu.Unlock()
			}()
		}
		const callers = 2000
		for range callers {
			call()
			time.Sleep(100 * time.Microsecond)
		}
		wg.Wait()
		// The goroutine has ended; a caller after a short pause still
		// waits for the gap since the last round's start.
		time.Sleep(gap / 4)
		call()
		wg.Wait()

		for i := 1; i < len(rounds); i++ {
			if d := rounds[i].start.Sub(rounds[i-1].start); d < gap {
				t.Errorf("rounds %d and %d started %v apart, want at least %v", i-1, i, d, gap)
			}
		}
		for _, a := range answers {
			i := slices.IndexFunc(rounds, func(s span) bool { return s.end.Equal(a.answered) })
			if i < 0 {
				t.Fatalf("a caller was answered at %v, when no round ended", a.answered)
			}
			if rounds[i].start.Before(a.arrived) {
				t.Errorf("a caller that arrived at %v was answered by round %d, which started at %v, before it",
					a.arrived, i, rounds[i].start)
			}
		}
		if len(answers) != callers+1 {
			t.Fatalf("%d callers answered, want %d", len(answers), callers+1)
		}
		// 200 ms of callers: a round at once, then one per gap, one more
		// for the last caller.
		if max := 200*time.Millisecond/gap + 3; len(rounds) > int(max) {
			t.Errorf("%d rounds for %d callers over 200 ms, want at most %d (one per %v)", len(rounds), callers+1, max, gap)
		}
	})
}

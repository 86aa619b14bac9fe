package threads

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"coord/lab"
)

var semaphoreExperiment = lab.Experiment{
	Name:     "semaphore",
	Rung:     lab.Threads,
	Short:    "the movie hall: a buffered channel of 2 as a semaphore",
	Shows:    "channel semaphore",
	Articles: "never more than 2 inside; the other 8 block on the send",
	Figure:   "2 in, 8 wait",
	Help: `A movie hall with two seats and ten goroutines that want in. The articles'
hall is a buffered channel of size 2: a send takes a seat (and blocks while
both are taken), a receive frees one. coord's column is the same hall built on
sync.Cond, the mechanism Part 1 describes and the articles leave without a
program: a counter of free seats, waited on under a mutex.

Every goroutine arrives at once and watches for 2 ms. The lab counts how many
are inside at the same instant and how many wait at the door, over --trials
showings (--procs sets the goroutines), and runs a hall with no semaphore as a
control, to show that the count would catch an overfull hall.

Predict before running: the most ever inside, and the most ever waiting?`,
	Quick: lab.Params{Trials: 10, Procs: 10},
	Full:  lab.Params{Trials: 30, Procs: 10},
	Run:   runSemaphore,
}

const (
	hallSeats    = 2
	showDuration = 2 * time.Millisecond
)

// hall admits goroutines to a limited number of seats.
type hall interface {
	enter()
	leave()
}

// chanHall is the articles' semaphore: a buffered channel whose capacity is
// the number of seats.
type chanHall chan struct{}

func (h chanHall) enter() { h <- struct{}{} }
func (h chanHall) leave() { <-h }

// condHall is coord's semaphore: free seats counted under a mutex, waited
// for on a condition variable. The loop around Wait re-checks the count,
// because a wakeup says only that the count may have changed.
type condHall struct {
	mu   sync.Mutex
	cond sync.Cond
	free int
}

func newCondHall(seats int) *condHall {
	h := &condHall{free: seats}
	h.cond.L = &h.mu
	return h
}

func (h *condHall) enter() {
	h.mu.Lock()
	for h.free == 0 {
		h.cond.Wait()
	}
	h.free--
	h.mu.Unlock()
}

func (h *condHall) leave() {
	h.mu.Lock()
	h.free++
	h.mu.Unlock()
	h.cond.Signal()
}

// openHall is the control: no semaphore at all.
type openHall struct{}

func (openHall) enter() {}
func (openHall) leave() {}

// showing is what one showing measured.
type showing struct {
	MaxInside  int `json:"max_inside"`
	MaxWaiting int `json:"max_waiting"`
}

// watch lets goroutines into h all at once; each stays for show. It returns
// the most that were inside, and waiting at the door, at any instant.
func watch(h hall, goroutines int, show time.Duration) showing {
	var inside, waiting, maxInside, maxWaiting atomic.Int64
	raise := func(peak *atomic.Int64, n int64) {
		for {
			old := peak.Load()
			if n <= old || peak.CompareAndSwap(old, n) {
				return
			}
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(goroutines)
	for range goroutines {
		go func() {
			defer wg.Done()
			<-start
			raise(&maxWaiting, waiting.Add(1))
			h.enter()
			waiting.Add(-1)
			raise(&maxInside, inside.Add(1))
			time.Sleep(show)
			inside.Add(-1) // before leave, so the count never runs ahead of the seats
			h.leave()
		}()
	}
	close(start)
	wg.Wait()
	return showing{MaxInside: int(maxInside.Load()), MaxWaiting: int(maxWaiting.Load())}
}

// semaphoreData is what the semaphore experiment measured.
type semaphoreData struct {
	Seats      int       `json:"seats"`
	Goroutines int       `json:"goroutines"`
	Channel    []showing `json:"channel"`
	Cond       []showing `json:"cond"`
	Open       []showing `json:"open"`
}

func runSemaphore(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	d := semaphoreData{Seats: hallSeats, Goroutines: env.Procs}
	env.Progress.Start("semaphore", env.Trials)
	for range env.Trials {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d.Channel = append(d.Channel, watch(make(chanHall, hallSeats), d.Goroutines, showDuration))
		d.Cond = append(d.Cond, watch(newCondHall(hallSeats), d.Goroutines, showDuration))
		d.Open = append(d.Open, watch(openHall{}, d.Goroutines, showDuration))
		env.Progress.Step()
	}
	return semaphoreResult(d), nil
}

func peaks(s []showing) (inside, waiting []int) {
	for _, x := range s {
		inside = append(inside, x.MaxInside)
		waiting = append(waiting, x.MaxWaiting)
	}
	return inside, waiting
}

func semaphoreResult(d semaphoreData) *lab.Result {
	chIn, chWait := peaks(d.Channel)
	condIn, condWait := peaks(d.Cond)
	openIn, _ := peaks(d.Open)
	res := &lab.Result{Data: d, Verdict: judgeSemaphore(d)}
	res.Original = fmt.Sprintf("channel of %d: at most %d inside, up to %d waiting", d.Seats, maxOf(chIn), maxOf(chWait))
	res.Coord = fmt.Sprintf("sync.Cond: at most %d inside, up to %d waiting", maxOf(condIn), maxOf(condWait))
	res.Row.Original = fmt.Sprintf("%d in, %d wait", maxOf(chIn), maxOf(chWait))
	res.Row.Coord = fmt.Sprintf("%d in, %d wait", maxOf(condIn), maxOf(condWait))
	res.AddDetail("workload", "%d goroutines, %d seats, %s each, %d showings per hall", d.Goroutines, d.Seats, showDuration, len(d.Channel))
	res.AddDetail("buffered channel", "most inside %d (full house in %d of %d showings), most waiting %d", maxOf(chIn), countEqual(chIn, d.Seats), len(chIn), maxOf(chWait))
	res.AddDetail("sync.Cond", "most inside %d (full house in %d of %d showings), most waiting %d", maxOf(condIn), countEqual(condIn, d.Seats), len(condIn), maxOf(condWait))
	res.AddDetail("control, no semaphore", "most inside %d: the count does catch an overfull hall", maxOf(openIn))
	res.Charts = []lab.Chart{{
		Name: "inside", Title: "semaphore: most goroutines inside at once", XLabel: "showing", YLabel: "goroutines inside",
		Kind: lab.Trials,
		Series: []lab.Series{
			{Label: "articles: buffered channel of 2", Values: lab.Floats(chIn)},
			{Label: "coord: sync.Cond", Values: lab.Floats(condIn)},
			{Label: "control: no semaphore", Values: lab.Floats(openIn)},
		},
	}}
	return res
}

// judgeSemaphore: the articles' channel never lets more than the seats in
// and fills them; so must coord's hall.
func judgeSemaphore(d semaphoreData) lab.Verdict {
	chIn, _ := peaks(d.Channel)
	condIn, _ := peaks(d.Cond)
	asArticles := len(chIn) > 0 && maxOf(chIn) == d.Seats
	coordOK := len(condIn) > 0 && maxOf(condIn) <= d.Seats && maxOf(condIn) > 0
	reason := fmt.Sprintf("most inside at once: %d with the channel, %d with sync.Cond, for %d seats", maxOf(chIn), maxOf(condIn), d.Seats)
	return lab.Judge(asArticles, coordOK, reason)
}

func maxOf(xs []int) int {
	if len(xs) == 0 {
		return 0
	}
	return slices.Max(xs)
}

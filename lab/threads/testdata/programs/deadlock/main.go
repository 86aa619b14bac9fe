// Command deadlock is the articles' lock-order inversion: two goroutines take
// two mutexes in opposite order. The lab builds it with CGO_ENABLED=0 (the Go
// runtime cannot detect a deadlock in a program that links cgo) and runs it
// as a child process, so the deadlock cannot take the lab down.
//
// Usage: deadlock inverted-sleep|inverted-nosleep|ordered-sleep
//
// It prints "done" if both goroutines finish.
package main

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// betweenLocks is the Sleep between the two acquisitions.
const betweenLocks = 20 * time.Millisecond

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: deadlock inverted-sleep|inverted-nosleep|ordered-sleep")
		os.Exit(2)
	}
	var inverted bool
	var sleep time.Duration
	switch os.Args[1] {
	case "inverted-sleep":
		inverted, sleep = true, betweenLocks
	case "inverted-nosleep":
		inverted = true
	case "ordered-sleep":
		sleep = betweenLocks
	default:
		fmt.Fprintf(os.Stderr, "deadlock: unknown variant %q\n", os.Args[1])
		os.Exit(2)
	}
	var a, b sync.Mutex
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		a.Lock()
		if sleep > 0 {
			time.Sleep(sleep)
		}
		b.Lock()
		b.Unlock()
		a.Unlock()
	}()
	go func() {
		defer wg.Done()
		first, second := &b, &a
		if !inverted {
			first, second = &a, &b
		}
		first.Lock()
		if sleep > 0 {
			time.Sleep(sleep)
		}
		second.Lock()
		second.Unlock()
		first.Unlock()
	}()
	wg.Wait()
	fmt.Println("done")
}

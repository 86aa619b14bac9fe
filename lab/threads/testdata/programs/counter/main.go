// Command counter is the articles' counter program, which the lab builds with
// -race to show what the race detector reports. Mode "racy" increments a
// shared int with no synchronisation; mode "mutex" guards it with a mutex in
// one struct. It prints the final total.
//
// Usage: counter racy|mutex GOROUTINES INCREMENTS
package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
)

type safeCounter struct {
	mu    sync.Mutex
	value int
}

func (c *safeCounter) inc() {
	c.mu.Lock()
	c.value++
	c.mu.Unlock()
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: counter racy|mutex GOROUTINES INCREMENTS")
		os.Exit(2)
	}
	goroutines, err1 := strconv.Atoi(os.Args[2])
	increments, err2 := strconv.Atoi(os.Args[3])
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "counter: GOROUTINES and INCREMENTS must be integers")
		os.Exit(2)
	}
	var wg sync.WaitGroup
	switch os.Args[1] {
	case "racy":
		counter := 0
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range increments {
					counter++
				}
			}()
		}
		wg.Wait()
		fmt.Println(counter)
	case "mutex":
		var c safeCounter
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range increments {
					c.inc()
				}
			}()
		}
		wg.Wait()
		fmt.Println(c.value)
	default:
		fmt.Fprintf(os.Stderr, "counter: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}

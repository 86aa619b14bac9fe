// Command prodcons is the articles' producer-consumer pipeline: three
// producers, two consumers and a bounded queue. With "two-waitgroups" it shuts
// down cleanly; with "one-waitgroup" main waits for the consumers before
// closing the queue they wait on, and the Go runtime reports the deadlock. The
// lab builds it with CGO_ENABLED=0 (the runtime cannot detect a deadlock in a
// program that links cgo).
//
// Usage: prodcons one-waitgroup|two-waitgroups
//
// It prints the number of items consumed and their sum.
package main

import (
	"fmt"
	"os"
	"sync"
)

const (
	producers        = 3
	consumers        = 2
	queueSize        = 10
	itemsPerProducer = 100
)

func main() {
	if len(os.Args) != 2 || (os.Args[1] != "one-waitgroup" && os.Args[1] != "two-waitgroups") {
		fmt.Fprintln(os.Stderr, "usage: prodcons one-waitgroup|two-waitgroups")
		os.Exit(2)
	}
	queue := make(chan int, queueSize)
	var mu sync.Mutex
	count, sum := 0, 0
	consume := func() {
		for item := range queue {
			mu.Lock()
			count++
			sum += item
			mu.Unlock()
		}
	}
	produce := func(p int) {
		for i := range itemsPerProducer {
			queue <- p*itemsPerProducer + i + 1
		}
	}
	if os.Args[1] == "one-waitgroup" {
		var wg sync.WaitGroup
		for p := range producers {
			wg.Add(1)
			go func() { defer wg.Done(); produce(p) }()
		}
		for range consumers {
			wg.Add(1)
			go func() { defer wg.Done(); consume() }()
		}
		wg.Wait() // waits for the consumers, who wait for the close below
		close(queue)
	} else {
		var producing, consuming sync.WaitGroup
		for p := range producers {
			producing.Add(1)
			go func() { defer producing.Done(); produce(p) }()
		}
		for range consumers {
			consuming.Add(1)
			go func() { defer consuming.Done(); consume() }()
		}
		producing.Wait()
		close(queue)
		consuming.Wait()
	}
	fmt.Println(count, sum)
}

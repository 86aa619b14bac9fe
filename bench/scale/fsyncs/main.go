// Command fsyncs measures what a 3-node commit on one disk waits for
// (issue 15, docs/BENCHMARKS.md "The single-client write, stage by
// stage"). Each of 400 iterations times, in turn: (a) a 330-byte write
// (a WAL record's size) and fdatasync over a file already written (a
// preallocated segment), alone; (b) a 4 KiB append and fdatasync of a
// growing file, dd oflag=dsync's pattern, which scripts/bench-vs-etcd.sh
// calls one fsync (the file's size changes, so ext4 commits its journal);
// (c) three writes and fdatasyncs like (a), started together on three
// files (a leader's and two followers' on one disk), until the second
// finishes (a quorum's) and the third; (d) a write like (a) into space
// allocated with fallocate(2) and never written, as the WAL's
// preallocated segments are (ext4 marks such extents unwritten, and the
// first write into each block converts it: a metadata change the
// fdatasync then commits). It prints the medians and their ratios.
//
//	go run ./fsyncs DIR      # in bench/scale; DIR on the disk to measure
package main

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: fsyncs DIR")
		os.Exit(2)
	}
	dir, n := os.Args[1], 400
	mk := func(name string, size int) *os.File {
		f, err := os.OpenFile(dir+"/"+name, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
		if err != nil {
			panic(err)
		}
		if size > 0 {
			f.Write(make([]byte, size))
		}
		f.Sync()
		return f
	}
	files := []*os.File{mk("a", 1<<20), mk("b", 1<<20), mk("c", 1<<20)}
	grow := mk("g", 0)
	allocated := mk("f", 0)
	if err := syscall.Fallocate(int(allocated.Fd()), 0, 0, 1<<20); err != nil {
		panic(err)
	}
	allocated.Sync()
	rec := make([]byte, 330)
	page := make([]byte, 4096)
	sync1 := func(f *os.File, off int64, p []byte) {
		if _, err := f.WriteAt(p, off); err != nil {
			panic(err)
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			panic(err)
		}
	}
	var lone, dd, second, third, unwritten []float64
	for i := 0; i < n; i++ {
		off := int64(i * 330 * 2)
		t := time.Now()
		sync1(files[0], off, rec)
		lone = append(lone, us(t))
		t = time.Now()
		sync1(grow, int64(i*4096), page)
		dd = append(dd, us(t))
		t = time.Now()
		sync1(allocated, off, rec)
		unwritten = append(unwritten, us(t))
		var wg sync.WaitGroup
		done := make(chan float64, 3)
		t = time.Now()
		for _, f := range files {
			wg.Go(func() { sync1(f, off+330, rec); done <- us(t) })
		}
		wg.Wait()
		ts := []float64{<-done, <-done, <-done}
		sort.Float64s(ts)
		second, third = append(second, ts[1]), append(third, ts[2])
	}
	m := func(x []float64) float64 { sort.Float64s(x); return x[len(x)/2] }
	fmt.Printf("fdatasync p50 over %d: overwrite alone %.0f µs; into fallocated space %.0f µs (%.2f×); dd-like 4 KiB append %.0f µs (%.2f×)\n",
		n, m(lone), m(unwritten), m(unwritten)/m(lone), m(dd), m(dd)/m(lone))
	fmt.Printf("three overwrites started together: the second done at %.0f µs (%.2f× one alone, %.2f× the dd-like one), the third at %.0f µs (%.2f×)\n",
		m(second), m(second)/m(lone), m(second)/m(dd), m(third), m(third)/m(lone))
}

func us(t time.Time) float64 { return float64(time.Since(t).Microseconds()) }

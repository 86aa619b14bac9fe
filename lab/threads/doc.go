// Package threads holds the lab's thread-level experiments (Part 1 of the
// Coordination series, as Part 4 describes its programs): race, mutex,
// granularity, semaphore, prodcons and deadlock.
//
// Each experiment re-implements the articles' program, including the broken
// variant the articles ask the reader to run, beside the fixed version, and
// measures both in the same run. The broken halves that would wedge the lab
// (a deadlock on purpose) run in a child process of the coord binary, where
// the Go runtime's own "all goroutines are asleep" report is caught and shown;
// the race detector's report comes from the same counter program built with
// -race by the go toolchain, when one is installed.
//
// Importing the package registers its experiments with package lab.
package threads

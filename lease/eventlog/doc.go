// Package eventlog writes lease.Events as JSON lines, one per line, stamped
// with the wall clock, a monotonic clock that every process of one machine
// shares, the writer's identity and its process id. It is the output of
// `coord elect --json`, `coord run --json` and the articles' programs, which
// the failover benchmark and the lab read from several processes at once.
//
// The package lives apart from lease so that the lease interface builds on
// every platform: the shared monotonic clock is CLOCK_MONOTONIC, which Linux
// and macOS provide. Elsewhere MonotonicNow returns 0 (no clock shared
// between processes is read), and events carry only the wall-clock time.
package eventlog

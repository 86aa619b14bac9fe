// Package bench holds what coord's benchmarks share: nearest-rank
// percentiles and a one-line description of the machine that every
// printed figure carries. The benchmarks themselves are in its
// subpackages (bench/failover) and in server/localcluster (the cluster's
// write throughput and failover times); the coord bench and coord cluster
// bench commands are thin shells over them, and docs/BENCHMARKS.md quotes
// their output with the command that reproduces it.
//
// Timing belongs here, in commands that print figures, never in a
// pass/fail test.
package bench

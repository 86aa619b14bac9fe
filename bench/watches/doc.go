// Package watches measures the resident memory (VmRSS) of a cluster node
// before, during and after a burst of long-poll watches: a local cluster of
// real coord server processes, the watches opened at once on the leader,
// each on its own connection as separate clients would. It is the logic of
// coord bench watches; docs/BENCHMARKS.md quotes its figures.
//
// The process running it holds one connection per watch: it needs a file
// descriptor limit above Config.Watches. Linux only (it reads /proc).
package watches

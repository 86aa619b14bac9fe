// Package failover measures how long a group of real processes has no
// leader after its leader is killed (SIGKILL) or terminated (SIGTERM):
// coord's lease (coord elect) against the articles' lease program (coord
// articles lease), in the same run. It is the logic of coord bench
// failover; docs/BENCHMARKS.md quotes its figures.
//
// Contenders are processes of the coord binary that print lease.Event
// JSON lines. Once every live contender has seen the same leader, the
// leader gets the signal, and the gap is the time from the signal to
// another process's "elected" event, both read on CLOCK_MONOTONIC, which
// all processes share. The signalled process is replaced and the next
// trial starts. The articles' trials take about ten seconds each, so
// Config.Parallel groups run at once, each on its own lock file.
package failover

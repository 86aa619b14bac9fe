// Package machines is the lab's third rung, machines on a network (the
// articles' Part 3): raft-failover, blocking-send, partition and
// quorum-size. Each experiment runs the articles' own program where there
// is one (articles.go re-implements their Raft simulation, bugs included)
// beside coord's cluster: real `coord server` processes on loopback, broken
// on purpose (server/localcluster), or coord's consensus core in the
// deterministic simulator (package sim) where the articles' timings would
// take too long in real time.
package machines

// Package localcluster runs a coord cluster of real `coord server`
// processes on loopback, and breaks it on purpose: it kills nodes (SIGKILL),
// pauses and resumes them (SIGSTOP, SIGCONT), restarts them from their data
// directories, and partitions them through a fault proxy
// (internal/faultproxy) that it puts between every pair of peers when
// Config.Proxies asks for it.
//
// `coord cluster up` uses it to start a cluster for people; the chaos test
// and the machine-level lab experiments use it to prove the cluster under
// faults.
//
// With proxies, peers talk through them: the node with the lower ID dials
// the one with the higher ID (transport/tcp), so each pair has one proxy,
// and node i's address for node j>i is that proxy's. Clients talk to the
// nodes' HTTP addresses directly.
package localcluster

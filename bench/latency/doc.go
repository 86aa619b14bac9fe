// Package latency measures how long a lease store takes to Acquire, Renew
// and Release, beside its own plain round trip (a GET for Redis, SELECT 1
// for PostgreSQL and SQLite, a Get for etcd, an exists for ZooKeeper):
// what the lease costs above talking to the store at all. It is the logic
// of coord bench latency. The machine is shared and noisy: compare stores
// within one run, not across runs.
package latency

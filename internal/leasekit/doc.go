// Package leasekit holds what coord's networked lease backends (lease/sqlite,
// lease/postgres, lease/redis, lease/etcd) share: argument checks, the rule
// that turns a transport failure into lease.ErrUnavailable, a bounded
// context for every store round trip, Feed, the coalescing channel that
// Backend.Watch returns, and Lifecycle, the closed flag that operations
// check and the watch goroutines that Close ends and waits for.
//
// It exists so that the four backends agree on the small things that the
// lease.Backend contract leaves to each implementation, and say so once.
package leasekit

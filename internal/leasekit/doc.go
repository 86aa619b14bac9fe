// Package leasekit holds what coord's networked lease backends (lease/sqlite,
// lease/postgres, lease/redis, lease/etcd) share: argument checks, the rule
// that turns a transport failure into lease.ErrUnavailable, a bounded
// context for every store round trip, and Feed, the coalescing channel that
// Backend.Watch returns.
//
// It exists so that the four backends agree on the small things that the
// lease.Backend contract leaves to each implementation, and say so once.
package leasekit

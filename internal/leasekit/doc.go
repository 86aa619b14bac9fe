// Package leasekit holds what coord's lease backends share: argument
// checks, the rule that turns a transport failure into
// lease.ErrUnavailable, a bounded context for every store round trip, Feed,
// the coalescing channel that Backend.Watch returns, and Lifecycle, the
// closed flag that operations check and the watch goroutines that Close
// ends and waits for. The store backends (lease/sqlite, lease/postgres,
// lease/redis, lease/etcd, lease/zookeeper, lease/raftlease) use all of
// it; lease/file, whose checks and lifetime follow its files, uses Feed.
//
// It exists so that the backends agree on the small things that the
// lease.Backend contract leaves to each implementation, and say so once.
package leasekit

// Package zookeeper is a lease.Backend on a ZooKeeper ensemble.
package zookeeper

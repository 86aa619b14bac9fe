package main

// The lease stores coord can open by URL (--store). Each backend package
// registers its URL scheme in init; add one line per backend.
import (
	_ "coord/lease/etcd"      // etcd://host:port,host:port
	_ "coord/lease/file"      // file:///path/to/leader.lock
	_ "coord/lease/postgres"  // postgres://user@host:port/db
	_ "coord/lease/raftlease" // raft://host:port,host:port,... (a coord cluster)
	_ "coord/lease/redis"     // redis://host:port/db, rediss:// (TLS)
	_ "coord/lease/sqlite"    // sqlite:///path/to/leases.db
	_ "coord/lease/zookeeper" // zk://host:port,host:port/chroot
)

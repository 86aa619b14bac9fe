// Package freeport picks loopback TCP ports for servers that bind them
// later, in another process: the nodes of `coord cluster up`, and the
// redis-server, etcd and postmaster processes the backends' tests start.
//
// Choosing a port and binding it are two steps, and in between another
// process may take the port. The kernel's own choice (listening on port 0)
// makes that likely on a busy machine: such a port lies in the ephemeral
// range, from which every outgoing connection also draws its local port, so
// a server restarted on its old port can find it held by some client's
// connection. freeport therefore picks ports below the ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), which connections never take,
// at random, checks that each is free on 127.0.0.1 by binding it, and never
// hands out the same port twice in one process. Only another process
// choosing ports the same way can still collide, and callers that can
// retry (localcluster.Start) do.
package freeport

package rafttest

import (
	"fmt"

	"coord/node"
	"coord/raft"
)

// readCommand runs "read ID RID": a ReadIndex read with request ID RID
// (Network.ReadIndex).
func readCommand(sc *script, args []string) error {
	nd, err := sc.node(args)
	if err != nil {
		return err
	}
	rid, err := parseIDs(args[2:])
	if err != nil || len(rid) != 1 {
		return fmt.Errorf("%w: read ID RID", errUsage)
	}
	return sc.n.ReadIndex(nd.ID, rid[0])
}

// ReadIndex starts a ReadIndex read on node id with request ID rid, through
// its handler, and handles the node's Ready. On a follower the handler asks
// the leader for the index. Once the node has applied through the index the
// leader confirmed, the read is served: a line says so, and the node's
// ReadStates records it. A read that fails (a leader deposed, a follower's
// leader changed or refused) prints a line saying so.
func (n *Network) ReadIndex(id, rid uint64) error {
	nd, err := n.Node(id)
	if err != nil {
		return err
	}
	err = nd.Handler.ReadIndex(rid, func(r node.Result) {
		if r.Err != nil {
			n.printf("node %d read %d failed: %v", nd.ID, rid, r.Err)
			return
		}
		nd.ReadStates = append(nd.ReadStates, raft.ReadState{ID: rid, Index: r.Index})
		n.printf("node %d read %d confirmed at index %d", nd.ID, rid, r.Index)
	})
	if err != nil {
		return err
	}
	return nd.Handler.Handle()
}

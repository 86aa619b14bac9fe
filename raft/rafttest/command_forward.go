package rafttest

import (
	"fmt"

	"coord/node"
)

// forwardCommand runs "forward ID DATA": node ID proposes DATA from
// whatever role it has (Network.Forward).
func forwardCommand(sc *script, args []string) error {
	nd, err := sc.node(args)
	if err != nil {
		return err
	}
	if len(args) != 3 {
		return fmt.Errorf("%w: forward ID DATA", errUsage)
	}
	return sc.n.Forward(nd.ID, []byte(args[2]))
}

// Forward proposes data on node id from whatever role it has, through its
// handler (node.Handler.Forward), and handles the node's Ready. A follower
// sends it to its leader in a ProposalRequest, and the leader answers where
// it appended it or that it refused it. Lines say where it went (placed)
// and how it ended on node id: applied there, lost (another entry
// committed at its index), or failed (refused, unanswered).
func (n *Network) Forward(id uint64, data []byte) error {
	nd, err := n.Node(id)
	if err != nil {
		return err
	}
	err = nd.Handler.Forward(data, node.ForwardWaiter{
		Placed: func(index, term uint64) {
			n.printf("node %d forward %q placed at %d/%d", nd.ID, data, index, term)
		},
		Done: func(r node.Result) {
			if r.Err != nil {
				n.printf("node %d forward %q failed: %v", nd.ID, data, r.Err)
				return
			}
			n.printf("node %d forward %q applied at %d", nd.ID, data, r.Index)
		},
	})
	if err != nil {
		return err
	}
	return nd.Handler.Handle()
}

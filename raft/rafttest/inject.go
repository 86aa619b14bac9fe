package rafttest

import (
	"coord/raft"
)

// Inject hands m to node m.To as if a peer had sent it, bypassing the
// queue and cut links, and handles the node's Ready. It returns the error
// Step returned: the way to show what the core does with a message no
// correct peer sends.
func (n *Network) Inject(m raft.Message) error {
	to, err := n.Node(m.To)
	if err != nil {
		return err
	}
	n.printf("%v (injected)", m)
	if err := to.Handler.Step(m); err != nil {
		return err
	}
	return to.Handler.Handle()
}

package rafttest

import "fmt"

// forwardCommand runs "forward ID DATA": node ID proposes DATA from
// whatever role it has (raft.Core.Forward). A follower sends it to its
// leader in a ProposalRequest; nothing says where it went, as in a server,
// where the follower recognizes its entry when it applies it.
func forwardCommand(sc *script, args []string) error {
	nd, err := sc.node(args)
	if err != nil {
		return err
	}
	if len(args) != 3 {
		return fmt.Errorf("%w: forward ID DATA", errUsage)
	}
	if err := nd.Core.Forward([]byte(args[2])); err != nil {
		return err
	}
	return nd.Handler.Handle()
}

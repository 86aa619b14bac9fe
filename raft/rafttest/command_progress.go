package rafttest

import "fmt"

// progressCommand runs "progress ID": the leader's view of each member.
func progressCommand(sc *script, args []string) error {
	nd, err := sc.node(args)
	if err != nil {
		return err
	}
	lines, err := sc.n.ProgressLines(nd.ID)
	if err != nil {
		return err
	}
	for _, l := range lines {
		fmt.Fprintln(sc.n.Out, l)
	}
	return nil
}

// unreachableCommand runs "unreachable ID PEER": node ID's transport
// reports that a message to PEER was dropped.
func unreachableCommand(sc *script, args []string) error {
	nd, err := sc.node(args)
	if err != nil {
		return err
	}
	peer, err := parseIDs(args[2:])
	if err != nil || len(peer) != 1 {
		return fmt.Errorf("%w: unreachable ID PEER", errUsage)
	}
	nd.Core.ReportUnreachable(peer[0])
	return nd.Handler.Handle()
}

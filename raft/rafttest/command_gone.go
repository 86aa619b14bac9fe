package rafttest

import "fmt"

// goneCommand runs "gone ID PEER": node ID's transport saw its connection
// to PEER closed from PEER's end, as when PEER's process dies
// (raft.Core.ReportPeerGone).
func goneCommand(sc *script, args []string) error {
	nd, err := sc.node(args)
	if err != nil {
		return err
	}
	peer, err := parseIDs(args[2:])
	if err != nil || len(peer) != 1 {
		return fmt.Errorf("%w: gone ID PEER", errUsage)
	}
	nd.Handler.ReportPeerGone(peer[0])
	return nd.Handler.Handle()
}

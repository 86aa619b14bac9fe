package rafttest

import "fmt"

// transferCommand runs "transfer ID TO": the leader hands over to TO.
func transferCommand(sc *script, args []string) error {
	nd, err := sc.node(args)
	if err != nil {
		return err
	}
	to, err := parseIDs(args[2:])
	if err != nil || len(to) != 1 {
		return fmt.Errorf("%w: transfer ID TO", errUsage)
	}
	if err := nd.Core.TransferLeadership(to[0]); err != nil {
		return err
	}
	return nd.Handler.Handle()
}

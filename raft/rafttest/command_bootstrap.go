package rafttest

import "fmt"

// bootstrapCommand runs "bootstrap ID...": a new cluster of these voters.
func bootstrapCommand(sc *script, args []string) error {
	ids, err := parseIDs(args[1:])
	if err != nil {
		return err
	}
	return sc.n.Bootstrap(ids...)
}

// addNodeCommand runs "add-node ID": an empty node that waits to be
// contacted by a leader.
func addNodeCommand(sc *script, args []string) error {
	ids, err := parseIDs(args[1:])
	if err != nil || len(ids) != 1 {
		return fmt.Errorf("%w: add-node ID", errUsage)
	}
	return sc.n.AddNode(ids[0])
}

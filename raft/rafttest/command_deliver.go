package rafttest

import (
	"fmt"

	"coord/raft"
)

// deliverCommand runs "deliver [F->T...]": the queued messages, all or
// those on the links named (* matches any node), in order.
func deliverCommand(sc *script, args []string) error {
	filter, err := parseLinks(args[1:])
	if err != nil {
		return err
	}
	_, err = sc.n.Deliver(filter)
	return err
}

// dropCommand runs "drop [F->T...]": the queued messages are discarded.
func dropCommand(sc *script, args []string) error {
	filter, err := parseLinks(args[1:])
	if err != nil {
		return err
	}
	before := len(sc.n.Queue)
	var keep []raft.Message
	for _, m := range sc.n.Queue {
		if filter != nil && !filter(m) {
			keep = append(keep, m)
		}
	}
	sc.n.Queue = keep
	fmt.Fprintf(sc.n.Out, "dropped %d messages\n", before-len(keep))
	return nil
}

// stabilizeCommand runs "stabilize": deliver until no message is left.
func stabilizeCommand(sc *script, _ []string) error {
	return sc.n.Stabilize(maxStabilizeRounds)
}

// processCommand runs "process": every node's handler does its Readies,
// and nothing is delivered.
func processCommand(sc *script, _ []string) error {
	_, err := sc.n.Process()
	return err
}

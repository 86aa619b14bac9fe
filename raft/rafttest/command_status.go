package rafttest

import "fmt"

// statusCommand runs "status [ID...]" and "log [ID...]": one line per node
// (all if none is named), its status or its stored log.
func statusCommand(sc *script, args []string) error {
	ids, err := parseIDs(args[1:])
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		ids = sc.n.IDs()
	}
	for _, id := range ids {
		if _, ok := sc.n.Nodes[id]; !ok {
			return fmt.Errorf("no node %d", id)
		}
		if args[0] == "status" {
			fmt.Fprintln(sc.n.Out, sc.n.StatusLine(id))
		} else {
			fmt.Fprintln(sc.n.Out, sc.n.LogLine(id))
		}
	}
	return nil
}

// queueCommand runs "queue": the messages waiting to be delivered.
func queueCommand(sc *script, _ []string) error {
	for _, m := range sc.n.Queue {
		fmt.Fprintln(sc.n.Out, m)
	}
	return nil
}

package rafttest

import "fmt"

// crashCommand runs "crash ID": the node stops; its storage survives.
func crashCommand(sc *script, args []string) error {
	nd, err := sc.node(args)
	if err != nil {
		return err
	}
	return sc.n.Crash(nd.ID)
}

// restartCommand runs "restart ID": a crashed node starts again from its
// storage.
func restartCommand(sc *script, args []string) error {
	ids, err := parseIDs(args[1:])
	if err != nil || len(ids) != 1 {
		return fmt.Errorf("%w: restart ID", errUsage)
	}
	return sc.n.Restart(ids[0])
}

// compactCommand runs "compact ID": the node snapshots at its applied
// index and compacts its log.
func compactCommand(sc *script, args []string) error {
	nd, err := sc.node(args)
	if err != nil {
		return err
	}
	return sc.n.Compact(nd.ID)
}

package rafttest

// tickCommand runs "tick ID [N]": node ID ticks N times, handling its
// Ready after each.
func tickCommand(sc *script, args []string) error {
	nd, err := sc.node(args)
	if err != nil {
		return err
	}
	c, err := count(args, 2)
	if err != nil {
		return err
	}
	return sc.n.Tick(nd.ID, c)
}

// tickAllCommand runs "tick-all [N]": every running node ticks, in ID
// order, N times.
func tickAllCommand(sc *script, args []string) error {
	c, err := count(args, 1)
	if err != nil {
		return err
	}
	for range c {
		for _, id := range sc.n.IDs() {
			if !sc.n.Nodes[id].crashed {
				if err := sc.n.Tick(id, 1); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// runRoundsCommand runs "run N": N rounds of a tick of every running node,
// then stabilize; deliveries are not printed.
func runRoundsCommand(sc *script, args []string) error {
	c, err := count(args, 1)
	if err != nil {
		return err
	}
	sc.n.Quiet = true
	defer func() { sc.n.Quiet = false }()
	for range c {
		for _, id := range sc.n.IDs() {
			if nd := sc.n.Nodes[id]; !nd.crashed {
				if err := nd.Handler.Tick(); err != nil {
					return err
				}
			}
		}
		if err := sc.n.Stabilize(maxStabilizeRounds); err != nil {
			return err
		}
	}
	return nil
}

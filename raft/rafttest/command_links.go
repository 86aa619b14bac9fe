package rafttest

import "fmt"

// cutCommand runs "cut F->T...": messages on these one-way links drop.
func cutCommand(sc *script, args []string) error {
	for _, link := range args[1:] {
		from, to, err := parseLink(link)
		if err != nil || from == 0 || to == 0 {
			return fmt.Errorf("%w: cut F->T with node IDs, got %q", errUsage, link)
		}
		sc.n.Cut(from, to)
	}
	return nil
}

// isolateCommand runs "isolate ID": every link to and from the node is cut.
func isolateCommand(sc *script, args []string) error {
	nd, err := sc.node(args)
	if err != nil {
		return err
	}
	sc.n.Isolate(nd.ID)
	return nil
}

// healCommand runs "heal": every link is restored.
func healCommand(sc *script, _ []string) error {
	sc.n.Heal()
	return nil
}

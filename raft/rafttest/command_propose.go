package rafttest

import (
	"fmt"
	"strconv"

	"coord/raft"
)

// proposeCommand runs "propose ID DATA" and prints where the entry went.
func proposeCommand(sc *script, args []string) error {
	nd, err := sc.node(args)
	if err != nil {
		return err
	}
	if len(args) != 3 {
		return fmt.Errorf("%w: propose ID DATA", errUsage)
	}
	index, term, err := nd.Core.Propose([]byte(args[2]))
	if err != nil {
		return err
	}
	fmt.Fprintf(sc.n.Out, "proposed at %d/%d\n", index, term)
	return nd.Handler.Handle()
}

// confCommand runs "conf ID (add-voter|add-learner|remove NODE)...": one
// membership change of these pairs; two voters or more go through joint
// consensus.
func confCommand(sc *script, args []string) error {
	nd, err := sc.node(args)
	if err != nil {
		return err
	}
	usage := fmt.Errorf("%w: conf ID (add-voter|add-learner|remove NODE)...", errUsage)
	if len(args) < 4 || len(args)%2 != 0 {
		return usage
	}
	types := map[string]raft.ConfChangeType{
		"add-voter": raft.ConfChangeAddVoter, "add-learner": raft.ConfChangeAddLearner, "remove": raft.ConfChangeRemove,
	}
	var cc raft.ConfChange
	for i := 2; i < len(args); i += 2 {
		t, ok := types[args[i]]
		target, err := strconv.ParseUint(args[i+1], 10, 64)
		if !ok || err != nil {
			return usage
		}
		cc.Changes = append(cc.Changes, raft.ConfChangeSingle{Type: t, NodeID: target})
	}
	index, term, err := nd.Core.ProposeConfChange(cc)
	if err != nil {
		return err
	}
	fmt.Fprintf(sc.n.Out, "proposed at %d/%d\n", index, term)
	return nd.Handler.Handle()
}

package rafttest

import (
	"fmt"
	"strconv"
)

// ProgressLines describes, one line per member, how leader id replicates
// to it: state, Match, Next, and whether it is paused for a probe or
// waiting for a snapshot. A node that does not lead has no progress.
func (n *Network) ProgressLines(id uint64) ([]string, error) {
	node, err := n.Node(id)
	if err != nil {
		return nil, err
	}
	st := node.Core.Status()
	if st.Progress == nil {
		return nil, fmt.Errorf("node %d is %v: no progress", id, st.Role)
	}
	var lines []string
	for _, member := range n.IDs() {
		pr, ok := st.Progress[member]
		if !ok {
			continue
		}
		line := fmt.Sprintf("%d: %v match=%d next=%d", member, pr.State, pr.Match, pr.Next)
		if pr.ProbeSent {
			line += " probe-sent"
		}
		if pr.PendingSnapshot != 0 {
			line += " pending-snapshot=" + strconv.FormatUint(pr.PendingSnapshot, 10)
		}
		lines = append(lines, line)
	}
	return lines, nil
}

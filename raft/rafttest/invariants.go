package rafttest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"coord/raft"
)

// ErrInvariant is wrapped by the error Check returns when the cores broke
// one of Raft's safety properties.
var ErrInvariant = errors.New("rafttest: invariant violated")

// invariants remembers what the cores of a Network did, and what they must
// therefore never do (Raft Figure 3):
//
//   - Election Safety: at most one leader per term.
//   - A node's commit index never moves back, across restarts too (commit
//     is persisted with every Ready).
//   - Log Matching: two logs that hold an entry with the same index and
//     term are identical up to it.
//   - Committed entries never change: an index, once committed on some
//     node, holds the same entry in every log that has it at or below its
//     own commit index (State Machine Safety follows).
//
// It is fed plain observations, so that its checks can be tested apart
// from the cores.
type invariants struct {
	leaders    map[uint64]uint64     // term -> leader
	commits    map[uint64]uint64     // node -> highest commit index seen
	committed  map[uint64]raft.Entry // index -> the entry committed there
	violations []string
}

func newInvariants() *invariants {
	return &invariants{leaders: map[uint64]uint64{}, commits: map[uint64]uint64{}, committed: map[uint64]raft.Entry{}}
}

func (inv *invariants) fail(format string, args ...any) {
	inv.violations = append(inv.violations, fmt.Sprintf(format, args...))
}

// state records that node id is in role at term with the commit index
// commit.
func (inv *invariants) state(id uint64, role raft.Role, term, commit uint64) {
	if role == raft.Leader {
		if other, ok := inv.leaders[term]; ok && other != id {
			inv.fail("election safety: nodes %d and %d both lead term %d", other, id, term)
		} else {
			inv.leaders[term] = id
		}
	}
	if prev := inv.commits[id]; commit < prev {
		inv.fail("commit of node %d moved back from %d to %d", id, prev, commit)
	} else {
		inv.commits[id] = commit
	}
}

// nodeLog is one node's log as the checks see it: entries from first on,
// and its commit index.
type nodeLog struct {
	id      uint64
	entries []raft.Entry
	commit  uint64
}

func (l nodeLog) at(i uint64) (raft.Entry, bool) {
	if len(l.entries) == 0 || i < l.entries[0].Index || i > l.entries[len(l.entries)-1].Index {
		return raft.Entry{}, false
	}
	return l.entries[i-l.entries[0].Index], true
}

func sameEntry(a, b raft.Entry) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type && bytes.Equal(a.Data, b.Data)
}

// logs checks every pair of logs for Log Matching, and every log's
// committed prefix against the entries committed before.
func (inv *invariants) logs(logs []nodeLog) {
	for _, l := range logs {
		for _, e := range l.entries {
			if e.Index > l.commit {
				break
			}
			if c, ok := inv.committed[e.Index]; !ok {
				inv.committed[e.Index] = e
			} else if !sameEntry(c, e) {
				inv.fail("committed entry changed: index %d was %d/%d, node %d (commit %d) holds %d/%d",
					e.Index, c.Index, c.Term, l.id, l.commit, e.Index, e.Term)
			}
		}
	}
	for i, a := range logs {
		for _, b := range logs[i+1:] {
			inv.logMatching(a, b)
		}
	}
}

// logMatching finds the last index where a and b hold entries of the same
// term, and checks that they agree on every entry up to it.
func (inv *invariants) logMatching(a, b nodeLog) {
	if len(a.entries) == 0 || len(b.entries) == 0 {
		return
	}
	lo := max(a.entries[0].Index, b.entries[0].Index)
	hi := min(a.entries[len(a.entries)-1].Index, b.entries[len(b.entries)-1].Index)
	for i := hi; i >= lo && i > 0; i-- {
		ea, _ := a.at(i)
		eb, _ := b.at(i)
		if ea.Term != eb.Term {
			continue
		}
		for j := lo; j <= i; j++ {
			x, _ := a.at(j)
			y, _ := b.at(j)
			if !sameEntry(x, y) {
				inv.fail("log matching: nodes %d and %d both hold %d/%d, yet differ at %d: %d/%d and %d/%d",
					a.id, b.id, i, ea.Term, j, x.Index, x.Term, y.Index, y.Term)
				return
			}
		}
		return
	}
}

// take returns the violations found since the last call, as one error.
func (inv *invariants) take() error {
	if len(inv.violations) == 0 {
		return nil
	}
	err := fmt.Errorf("%w: %s", ErrInvariant, strings.Join(inv.violations, "; "))
	inv.violations = nil
	return err
}

// observe records a running node's state; the Network calls it after each
// Ready it handles, so that a leader that comes and goes within one command
// is seen.
func (n *Network) observe(node *Node) {
	st := node.Core.Status()
	n.invariants().state(node.ID, st.Role, st.Term, st.Commit)
}

// Check runs the safety checks over every node, running or crashed (a
// crashed node's storage is its log), and returns an error wrapping
// ErrInvariant that lists what was violated since the last Check, if
// anything. RunScript calls it after every command.
func (n *Network) Check() error {
	inv := n.invariants()
	var logs []nodeLog
	for _, id := range n.IDs() {
		node := n.Nodes[id]
		if !node.crashed {
			n.observe(node)
		}
		first, _ := node.Storage.FirstIndex()
		last, _ := node.Storage.LastIndex()
		entries, err := node.Storage.Entries(first, last+1, 0)
		if err != nil && first <= last {
			inv.fail("node %d: reading its log [%d, %d]: %v", id, first, last, err)
			continue
		}
		hs, _, _ := node.Storage.InitialState()
		logs = append(logs, nodeLog{id: id, entries: entries, commit: hs.Commit})
	}
	inv.logs(logs)
	return inv.take()
}

func (n *Network) invariants() *invariants {
	if n.inv == nil {
		n.inv = newInvariants()
	}
	return n.inv
}

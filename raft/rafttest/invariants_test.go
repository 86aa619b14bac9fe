package rafttest

import (
	"errors"
	"strings"
	"testing"

	"coord/raft"
)

// Each check fails on the violation it is for, and only then.
func TestInvariantsCatchViolations(t *testing.T) {
	entries := func(terms ...uint64) []raft.Entry {
		var es []raft.Entry
		for i, term := range terms {
			es = append(es, raft.Entry{Index: uint64(i + 1), Term: term})
		}
		return es
	}
	tests := []struct {
		name string
		feed func(*invariants)
		want string // "" for no violation
	}{
		{"one leader per term", func(inv *invariants) {
			inv.state(1, raft.Leader, 2, 0)
			inv.state(1, raft.Leader, 2, 1)
			inv.state(2, raft.Leader, 3, 1)
		}, ""},
		{"two leaders in a term", func(inv *invariants) {
			inv.state(1, raft.Leader, 2, 0)
			inv.state(2, raft.Leader, 2, 0)
		}, "nodes 1 and 2 both lead term 2"},
		{"commit moves back", func(inv *invariants) {
			inv.state(3, raft.Follower, 2, 5)
			inv.state(3, raft.Follower, 2, 4)
		}, "commit of node 3 moved back from 5 to 4"},
		{"logs diverging after a common prefix", func(inv *invariants) {
			inv.logs([]nodeLog{{id: 1, entries: entries(1, 2, 2)}, {id: 2, entries: entries(1, 2, 3, 3)}})
		}, ""},
		{"same index and term, different predecessor", func(inv *invariants) {
			inv.logs([]nodeLog{{id: 1, entries: entries(1, 2, 3)}, {id: 2, entries: entries(1, 3, 3)}})
		}, "nodes 1 and 2 both hold 3/3, yet differ at 2"},
		{"same index and term, different data", func(inv *invariants) {
			a, b := entries(1, 2), entries(1, 2)
			b[1].Data = []byte("x")
			inv.logs([]nodeLog{{id: 1, entries: a}, {id: 2, entries: b}})
		}, "differ at 2"},
		{"committed entry replaced", func(inv *invariants) {
			inv.logs([]nodeLog{{id: 1, entries: entries(1, 2, 2), commit: 3}})
			inv.logs([]nodeLog{{id: 1, entries: entries(1, 2, 4), commit: 3}})
		}, "committed entry changed: index 3 was 3/2, node 1 (commit 3) holds 3/4"},
		{"uncommitted entry replaced", func(inv *invariants) {
			inv.logs([]nodeLog{{id: 1, entries: entries(1, 2, 2), commit: 2}})
			inv.logs([]nodeLog{{id: 1, entries: entries(1, 2, 4), commit: 2}})
		}, ""},
	}
	for _, tt := range tests {
		inv := newInvariants()
		tt.feed(inv)
		err := inv.take()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v, want no violation", tt.name, err)
		case tt.want != "" && (!errors.Is(err, ErrInvariant) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want ErrInvariant saying %q", tt.name, err, tt.want)
		}
	}
}

// Check reads the real nodes' logs: an entry committed everywhere and then
// overwritten in one node's storage (a disk that lies, say) is reported.
func TestCheckSeesACorruptedLog(t *testing.T) {
	n := NewNetwork()
	if err := n.Bootstrap(1, 2, 3); err != nil {
		t.Fatal(err)
	}
	n.Nodes[1].Core.Campaign()
	if err := n.Stabilize(100); err != nil {
		t.Fatal(err)
	}
	index, term, err := n.Nodes[1].Core.Propose([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Stabilize(100); err != nil {
		t.Fatal(err)
	}
	if err := n.Check(); err != nil {
		t.Fatalf("a healthy cluster: %v", err)
	}
	if err := n.Nodes[3].Storage.Append([]raft.Entry{{Index: index, Term: term, Data: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	err = n.Check()
	if !errors.Is(err, ErrInvariant) || !strings.Contains(err.Error(), "log matching") {
		t.Fatalf("after overwriting a committed entry on node 3: %v, want a log matching violation", err)
	}
	if err := n.Check(); err == nil || !strings.Contains(err.Error(), "log matching") {
		t.Fatalf("the corruption is still there, and Check must still say so: %v", err)
	}
}

package rafttest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"

	"coord/raft"
)

// maxStabilizeRounds bounds "stabilize" so a livelock fails instead of
// hanging.
const maxStabilizeRounds = 1000

// RunScript replays the transcript in text and returns the regenerated
// transcript: comments, blank lines and commands are kept, output lines are
// produced anew. The commands are:
//
//	config KEY=VALUE...     set election=, heartbeat=, prevote=, checkquorum=,
//	                        inflight=, appendbytes= for nodes started later
//	bootstrap ID...         start a new cluster with these voters
//	add-node ID             start an empty node that joins a cluster
//	tick ID [N]             tick a node N times (default 1)
//	tick-all [N]            tick every running node N times
//	run N                   N rounds of: tick every running node, then
//	                        stabilize; deliveries are not printed
//	campaign ID             start an election now
//	propose ID DATA         propose a command
//	conf ID OP NODE...      propose add-voter, add-learner or remove (pairs
//	                        of OP NODE; two voters or more go through joint
//	                        consensus)
//	transfer ID TO          transfer leadership
//	read ID RID             ReadIndex with request ID RID
//	deliver [F->T...]       deliver queued messages (all, or matching links;
//	                        * matches any node)
//	drop [F->T...]          discard queued messages
//	inject F->T TYPE K=V... step a message into node T as if F sent it
//	                        (keys: term, index, logterm, commit, round,
//	                        reject, transfer)
//	progress ID             the leader's view of each member (state,
//	                        match, next)
//	unreachable ID PEER     tell node ID a message to PEER was dropped
//	stabilize               deliver until no message is left
//	process                 handle every node's Ready without delivering
//	cut F->T...             drop messages on these one-way links
//	isolate ID              cut every link to and from a node
//	heal                    restore every link
//	crash ID / restart ID   stop a node (storage survives) / start it again
//	compact ID              snapshot a node at its applied index, compact
//	status [ID...]          one line per node
//	log [ID...]             the stored log of each node
//	queue                   the messages waiting to be delivered
//
// After every command it runs the safety checks (Network.Check): a
// violation is written to the output as "invariant violated: ...", so that
// every transcript is also a check of Raft's safety properties.
func RunScript(text string) string {
	out, _ := runScript(text)
	return out
}

// runScript is RunScript that also returns how many commands were followed
// by a safety violation.
func runScript(text string) (string, int) {
	violations := 0
	var out bytes.Buffer
	n := NewNetwork()
	n.Out = &out
	overrides := map[string]string{}
	n.Config = func(id uint64) raft.Config {
		cfg := DefaultConfig(id)
		_ = applyOverrides(&cfg, overrides) // checked by the config command
		return cfg
	}
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "> "):
			out.WriteString(line + "\n")
			if err := runCommand(n, overrides, strings.Fields(line[2:])); err != nil {
				fmt.Fprintf(&out, "error: %v\n", err)
			}
			if err := n.Check(); err != nil {
				fmt.Fprintf(&out, "%v\n", err)
				violations++
			}
		case strings.HasPrefix(line, "#"), strings.TrimSpace(line) == "":
			out.WriteString(line + "\n")
		}
	}
	return out.String(), violations
}

// RunFile replays the transcript at path and reports whether the output
// matches. With rewrite, it writes the new transcript instead. A safety
// violation is an error either way: no golden output can make it pass.
func RunFile(path string, rewrite bool) (diff string, err error) {
	old, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	got, violations := runScript(string(old))
	if violations > 0 {
		return "", fmt.Errorf("%s: %d commands broke a safety invariant (see \"invariant violated\" in the output):\n%s",
			path, violations, got)
	}
	if got == string(old) {
		return "", nil
	}
	if rewrite {
		return "", os.WriteFile(path, []byte(got), 0o644)
	}
	return firstDifference(string(old), got), nil
}

func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  want: %s\n  got:  %s", i+1, wl, gl)
		}
	}
	return ""
}

var errUsage = errors.New("bad command")

func runCommand(n *Network, overrides map[string]string, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: empty", errUsage)
	}
	ids, idErr := parseIDs(args[1:])
	one := func() (*Node, error) {
		if len(args) < 2 {
			return nil, fmt.Errorf("%w: %s needs a node ID", errUsage, args[0])
		}
		id, err := strconv.ParseUint(args[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: node ID %q", errUsage, args[1])
		}
		return n.Node(id)
	}
	count := func(i int) (int, error) {
		if len(args) <= i {
			return 1, nil
		}
		return strconv.Atoi(args[i])
	}
	switch args[0] {
	case "config":
		next := maps.Clone(overrides)
		for _, kv := range args[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("%w: %q is not KEY=VALUE", errUsage, kv)
			}
			next[k] = v
		}
		cfg := DefaultConfig(1)
		if err := applyOverrides(&cfg, next); err != nil {
			return err
		}
		maps.Copy(overrides, next)
		return nil
	case "bootstrap":
		if idErr != nil {
			return idErr
		}
		return n.Bootstrap(ids...)
	case "add-node":
		if idErr != nil || len(ids) != 1 {
			return fmt.Errorf("%w: add-node ID", errUsage)
		}
		return n.AddNode(ids[0])
	case "tick":
		node, err := one()
		if err != nil {
			return err
		}
		c, err := count(2)
		if err != nil {
			return err
		}
		return n.Tick(node.ID, c)
	case "tick-all":
		c, err := count(1)
		if err != nil {
			return err
		}
		for range c {
			for _, id := range n.IDs() {
				if !n.Nodes[id].crashed {
					if err := n.Tick(id, 1); err != nil {
						return err
					}
				}
			}
		}
		return nil
	case "run":
		c, err := count(1)
		if err != nil {
			return err
		}
		n.Quiet = true
		defer func() { n.Quiet = false }()
		for range c {
			for _, id := range n.IDs() {
				if !n.Nodes[id].crashed {
					n.Nodes[id].Core.Tick()
				}
			}
			if err := n.Stabilize(maxStabilizeRounds); err != nil {
				return err
			}
		}
		return nil
	case "campaign":
		node, err := one()
		if err != nil {
			return err
		}
		node.Core.Campaign()
		return n.processReadyOf(node)
	case "propose":
		node, err := one()
		if err != nil {
			return err
		}
		if len(args) != 3 {
			return fmt.Errorf("%w: propose ID DATA", errUsage)
		}
		index, term, err := node.Core.Propose([]byte(args[2]))
		if err != nil {
			return err
		}
		fmt.Fprintf(n.Out, "proposed at %d/%d\n", index, term)
		return n.processReadyOf(node)
	case "conf":
		return confCommand(n, args, one)
	case "transfer":
		node, err := one()
		if err != nil {
			return err
		}
		to, err := parseIDs(args[2:])
		if err != nil || len(to) != 1 {
			return fmt.Errorf("%w: transfer ID TO", errUsage)
		}
		if err := node.Core.TransferLeadership(to[0]); err != nil {
			return err
		}
		return n.processReadyOf(node)
	case "read":
		node, err := one()
		if err != nil {
			return err
		}
		rid, err := parseIDs(args[2:])
		if err != nil || len(rid) != 1 {
			return fmt.Errorf("%w: read ID RID", errUsage)
		}
		if err := node.Core.ReadIndex(rid[0]); err != nil {
			return err
		}
		return n.processReadyOf(node)
	case "deliver", "drop":
		filter, err := parseLinks(args[1:])
		if err != nil {
			return err
		}
		if args[0] == "drop" {
			before := len(n.Queue)
			var keep []raft.Message
			for _, m := range n.Queue {
				if filter != nil && !filter(m) {
					keep = append(keep, m)
				}
			}
			n.Queue = keep
			fmt.Fprintf(n.Out, "dropped %d messages\n", before-len(keep))
			return nil
		}
		_, err = n.Deliver(filter)
		return err
	case "inject":
		return injectCommand(n, args)
	case "progress", "unreachable":
		node, err := one()
		if err != nil {
			return err
		}
		if args[0] == "progress" {
			return progressCommand(n, node)
		}
		return unreachableCommand(n, node, args)
	case "stabilize":
		return n.Stabilize(maxStabilizeRounds)
	case "process":
		_, err := n.Process()
		return err
	case "cut":
		for _, link := range args[1:] {
			from, to, err := parseLink(link)
			if err != nil || from == 0 || to == 0 {
				return fmt.Errorf("%w: cut F->T with node IDs, got %q", errUsage, link)
			}
			n.Cut(from, to)
		}
		return nil
	case "isolate":
		node, err := one()
		if err != nil {
			return err
		}
		n.Isolate(node.ID)
		return nil
	case "heal":
		n.Heal()
		return nil
	case "crash":
		node, err := one()
		if err != nil {
			return err
		}
		return n.Crash(node.ID)
	case "restart":
		if idErr != nil || len(ids) != 1 {
			return fmt.Errorf("%w: restart ID", errUsage)
		}
		return n.Restart(ids[0])
	case "compact":
		node, err := one()
		if err != nil {
			return err
		}
		return n.Compact(node.ID)
	case "status", "log":
		if idErr != nil {
			return idErr
		}
		if len(ids) == 0 {
			ids = n.IDs()
		}
		for _, id := range ids {
			if _, ok := n.Nodes[id]; !ok {
				return fmt.Errorf("no node %d", id)
			}
			if args[0] == "status" {
				fmt.Fprintln(n.Out, n.StatusLine(id))
			} else {
				fmt.Fprintln(n.Out, n.LogLine(id))
			}
		}
		return nil
	case "queue":
		for _, m := range n.Queue {
			fmt.Fprintln(n.Out, m)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
}

func confCommand(n *Network, args []string, one func() (*Node, error)) error {
	node, err := one()
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
	index, term, err := node.Core.ProposeConfChange(cc)
	if err != nil {
		return err
	}
	fmt.Fprintf(n.Out, "proposed at %d/%d\n", index, term)
	return n.processReadyOf(node)
}

func parseIDs(args []string) ([]uint64, error) {
	var ids []uint64
	for _, a := range args {
		id, err := strconv.ParseUint(a, 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("%w: node ID %q", errUsage, a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// parseLink parses "F->T"; "*" is 0, meaning any node.
func parseLink(s string) (from, to uint64, err error) {
	f, t, ok := strings.Cut(s, "->")
	if !ok {
		return 0, 0, fmt.Errorf("%w: link %q is not F->T", errUsage, s)
	}
	parse := func(x string) (uint64, error) {
		if x == "*" {
			return 0, nil
		}
		return strconv.ParseUint(x, 10, 64)
	}
	if from, err = parse(f); err != nil {
		return 0, 0, fmt.Errorf("%w: link %q", errUsage, s)
	}
	if to, err = parse(t); err != nil {
		return 0, 0, fmt.Errorf("%w: link %q", errUsage, s)
	}
	return from, to, nil
}

func parseLinks(args []string) (func(raft.Message) bool, error) {
	if len(args) == 0 {
		return nil, nil
	}
	var links [][2]uint64
	for _, a := range args {
		from, to, err := parseLink(a)
		if err != nil {
			return nil, err
		}
		links = append(links, [2]uint64{from, to})
	}
	return func(m raft.Message) bool {
		for _, l := range links {
			if (l[0] == 0 || l[0] == m.From) && (l[1] == 0 || l[1] == m.To) {
				return true
			}
		}
		return false
	}, nil
}

// applyOverrides sets the configuration fields that overrides name. An
// unknown key or a value that does not parse is an error, so that a
// transcript cannot silently run with a setting it did not ask for.
func applyOverrides(cfg *raft.Config, overrides map[string]string) error {
	for k, v := range overrides {
		var err error
		switch k {
		case "election":
			cfg.ElectionTicks, err = strconv.Atoi(v)
		case "heartbeat":
			cfg.HeartbeatTicks, err = strconv.Atoi(v)
		case "prevote":
			cfg.PreVote, err = strconv.ParseBool(v)
		case "checkquorum":
			cfg.CheckQuorum, err = strconv.ParseBool(v)
		case "inflight":
			cfg.MaxInflightMsgs, err = strconv.Atoi(v)
		case "appendbytes":
			cfg.MaxAppendBytes, err = strconv.ParseUint(v, 10, 64)
		default:
			return fmt.Errorf("%w: unknown config key %q", errUsage, k)
		}
		if err != nil {
			return fmt.Errorf("%w: config %s=%s: %v", errUsage, k, v, err)
		}
	}
	return nil
}

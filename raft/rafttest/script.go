package rafttest

import (
	"bytes"
	"errors"
	"fmt"
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
//	forward ID DATA         propose from any role (a follower forwards it)
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
//	gone ID PEER            tell node ID that PEER closed their connection
//	                        (a hint that PEER's process died)
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
	sc := &script{n: NewNetwork(), overrides: map[string]string{}}
	n := sc.n
	n.Out = &out
	n.Config = func(id uint64) raft.Config {
		cfg := DefaultConfig(id)
		_ = applyOverrides(&cfg, sc.overrides) // checked by the config command
		return cfg
	}
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "> "):
			out.WriteString(line + "\n")
			if err := sc.run(strings.Fields(line[2:])); err != nil {
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

// script is the state of a transcript being replayed: the network, and the
// configuration the config command set for nodes started later.
type script struct {
	n         *Network
	overrides map[string]string
}

// A command runs one transcript command, args[0] being its name. Each
// lives in its own file, command_*.go (as etcd's rafttest does it).
type command func(sc *script, args []string) error

// commands maps each command's name to its handler.
var commands = map[string]command{
	"config":      configCommand,
	"bootstrap":   bootstrapCommand,
	"add-node":    addNodeCommand,
	"tick":        tickCommand,
	"tick-all":    tickAllCommand,
	"run":         runRoundsCommand,
	"campaign":    campaignCommand,
	"propose":     proposeCommand,
	"forward":     forwardCommand,
	"conf":        confCommand,
	"transfer":    transferCommand,
	"read":        readCommand,
	"deliver":     deliverCommand,
	"drop":        dropCommand,
	"inject":      injectCommand,
	"progress":    progressCommand,
	"unreachable": unreachableCommand,
	"gone":        goneCommand,
	"stabilize":   stabilizeCommand,
	"process":     processCommand,
	"cut":         cutCommand,
	"isolate":     isolateCommand,
	"heal":        healCommand,
	"crash":       crashCommand,
	"restart":     restartCommand,
	"compact":     compactCommand,
	"status":      statusCommand,
	"log":         statusCommand,
	"queue":       queueCommand,
}

// run runs one command.
func (sc *script) run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: empty", errUsage)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	return cmd(sc, args)
}

// node returns the running node args[1] names.
func (sc *script) node(args []string) (*Node, error) {
	if len(args) < 2 {
		return nil, fmt.Errorf("%w: %s needs a node ID", errUsage, args[0])
	}
	id, err := strconv.ParseUint(args[1], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: node ID %q", errUsage, args[1])
	}
	return sc.n.Node(id)
}

// count parses the optional count args[i] (1 if absent).
func count(args []string, i int) (int, error) {
	if len(args) <= i {
		return 1, nil
	}
	return strconv.Atoi(args[i])
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

package rafttest

import (
	"fmt"
	"strconv"
	"strings"

	"coord/raft"
)

// injectCommand parses "inject F->T TYPE KEY=VALUE..." and injects the
// message. TYPE is a message type's name (AppendRequest, ...); the keys are
// term, index (LogIndex), logterm (LogTerm), commit, round (ReadRound), lead and
// reject and transfer (booleans).
func injectCommand(sc *script, args []string) error {
	usage := fmt.Errorf("%w: inject F->T TYPE [term=N index=N logterm=N commit=N round=N lead=N reject=B transfer=B]", errUsage)
	if len(args) < 3 {
		return usage
	}
	from, to, err := parseLink(args[1])
	if err != nil || from == 0 || to == 0 {
		return usage
	}
	m := raft.Message{From: from, To: to}
	for t := raft.MsgVoteRequest; t.Valid(); t++ {
		if t.String() == args[2] {
			m.Type = t
		}
	}
	if m.Type == 0 {
		return fmt.Errorf("%w: unknown message type %q", errUsage, args[2])
	}
	for _, kv := range args[3:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return usage
		}
		var err error
		switch k {
		case "term":
			m.Term, err = strconv.ParseUint(v, 10, 64)
		case "index":
			m.LogIndex, err = strconv.ParseUint(v, 10, 64)
		case "logterm":
			m.LogTerm, err = strconv.ParseUint(v, 10, 64)
		case "commit":
			m.Commit, err = strconv.ParseUint(v, 10, 64)
		case "round":
			m.ReadRound, err = strconv.ParseUint(v, 10, 64)
		case "lead":
			m.Lead, err = strconv.ParseUint(v, 10, 64)
		case "reject":
			m.Reject, err = strconv.ParseBool(v)
		case "transfer":
			m.Transfer, err = strconv.ParseBool(v)
		default:
			return fmt.Errorf("%w: unknown message field %q", errUsage, k)
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %v", errUsage, kv, err)
		}
	}
	return sc.n.Inject(m)
}

package chaos

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// Kind is the kind of an operation in the history.
type Kind uint8

// The operations the clients perform.
const (
	Get Kind = iota + 1
	Put
	CAS // put with prev_revision
)

// Input is an operation as invoked.
type Input struct {
	Kind  Kind
	Key   string
	Value string
	Prev  uint64 // CAS: the revision expected (0: the key must not exist)
}

// Output is an operation's result as the client saw it.
type Output struct {
	// Unknown: the client gave up; the write may or may not have applied.
	Unknown bool
	// OK: a write applied, or a CAS succeeded. False for a CAS refused
	// with a conflict.
	OK bool
	// Exists and Value: what a Get read.
	Exists bool
	Value  string
	// Rev: the revision written (Put, CAS), read (Get), or the current one
	// a conflicting CAS reported (0: absent).
	Rev uint64
}

// register is the model's state of one key. Revisions are the cluster's
// log indexes: they only grow, but a write whose outcome is unknown leaves
// the revision unknown until an operation reports it.
type register struct {
	Exists   bool
	Value    string
	Rev      uint64
	RevKnown bool
}

// current returns the key's revision (0 when absent) and whether the
// model knows it.
func (r register) current() (uint64, bool) {
	if !r.Exists {
		return 0, true
	}
	return r.Rev, r.RevKnown
}

func stepRegister(s register, in Input, out Output) []register {
	cur, known := s.current()
	switch in.Kind {
	case Get:
		if out.Exists != s.Exists || (out.Exists && out.Value != s.Value) || (known && out.Rev != cur) {
			return nil
		}
		s.Rev, s.RevKnown = out.Rev, true
		return []register{s}
	case Put:
		applied := register{Exists: true, Value: in.Value}
		if out.Unknown {
			return []register{s, applied}
		}
		if s.RevKnown && out.Rev <= s.Rev {
			return nil // revisions only grow
		}
		applied.Rev, applied.RevKnown = out.Rev, true
		return []register{applied}
	case CAS:
		// With the revision unknown, any non-zero expectation might match.
		matches := (known && in.Prev == cur) || (!known && in.Prev != 0)
		applied := register{Exists: true, Value: in.Value}
		switch {
		case out.Unknown:
			if matches {
				return []register{s, applied}
			}
			return []register{s}
		case out.OK:
			if !matches || (s.RevKnown && out.Rev <= s.Rev) {
				return nil
			}
			applied.Rev, applied.RevKnown = out.Rev, true
			return []register{applied}
		default: // refused: the key was at out.Rev, not at in.Prev
			if out.Rev == in.Prev || (known && out.Rev != cur) || (!known && out.Rev == 0) {
				return nil
			}
			s.Rev, s.RevKnown = out.Rev, true
			return []register{s}
		}
	}
	return nil
}

// Model is the porcupine model of the cluster's keys: independent
// registers with revisions, one partition per key.
var Model = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var parts [][]porcupine.Operation
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() []any { return []any{register{}} },
	Step: func(state, input, output any) []any {
		var out []any
		for _, s := range stepRegister(state.(register), input.(Input), output.(Output)) {
			out = append(out, s)
		}
		return out
	},
	Equal: func(a, b any) bool { return a.(register) == b.(register) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		res := fmt.Sprintf("ok rev %d", out.Rev)
		switch {
		case out.Unknown:
			res = "unknown"
		case in.Kind == Get && !out.Exists:
			res = "absent"
		case in.Kind == Get:
			res = fmt.Sprintf("%q rev %d", out.Value, out.Rev)
		case !out.OK:
			res = fmt.Sprintf("conflict, at rev %d", out.Rev)
		}
		switch in.Kind {
		case Get:
			return fmt.Sprintf("get(%s) -> %s", in.Key, res)
		case Put:
			return fmt.Sprintf("put(%s, %q) -> %s", in.Key, in.Value, res)
		default:
			return fmt.Sprintf("cas(%s, prev %d, %q) -> %s", in.Key, in.Prev, in.Value, res)
		}
	},
	DescribeState: func(state any) string {
		s := state.(register)
		if !s.Exists {
			return "absent"
		}
		if !s.RevKnown {
			return fmt.Sprintf("%q rev ?", s.Value)
		}
		return fmt.Sprintf("%q rev %d", s.Value, s.Rev)
	},
}

// Package rafttest drives raft cores in memory for tests: a Network of
// cores with a synchronous, controllable message queue, and a scenario
// runner that replays transcripts under testdata/ and compares them with
// golden output (regenerated with `go test ./raft/rafttest -rewrite`).
// Each core's Readies are done by the production Ready handler,
// node.Handler, whose hooks write the transcript's lines.
//
// A transcript is a text file. Lines starting with "#" are comments that
// say what the scenario shows; lines starting with "> " are commands; every
// other line is the output of the command above it. The commands are listed
// in RunScript's documentation; each has its handler in its own file,
// command_*.go.
//
// After every command the runner checks Raft's safety properties over all
// the nodes (Network.Check: one leader per term, commit never moving back,
// log matching, committed entries never changing), so every transcript is
// also a safety check; a violation fails it even with -rewrite.
package rafttest

// Package wire is the binary encoding coord's own formats share: the
// cluster's replicated commands and state machine snapshots (server), and
// the Raft transport's frames (transport/tcp). Integers are varints, byte
// strings and strings are length-prefixed, booleans are one byte.
//
// A Decoder never trusts a length it reads: every length and count is
// checked against a limit and against the bytes left, so a corrupt or hostile
// input cannot make it allocate more than the input's size. Its first error
// sticks: later reads return zero values, and Done reports what failed
// first, wrapped in the caller's sentinel error.
package wire

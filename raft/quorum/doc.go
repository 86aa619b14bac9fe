// Package quorum is the majority arithmetic of the Raft core: which log index
// a majority of voters has stored, and whether a set of votes wins, loses or
// is still pending. It is pure and allocation-light, so the core can call it
// on every acknowledgement.
//
// Any two majorities of the same voter set share at least one member (quorum
// intersection); that witness is what carries committed entries across
// leader changes (Raft §5.4).
package quorum

// Package assert checks invariants and panics when one is broken.
//
// An invariant that fails is a bug in coord, not an operating error: a disk
// that fills up or a peer that stops answering is returned as an error, while
// a commit index beyond the last log index is asserted. The panic message
// names both sides so that the failure can be read from a log line alone:
//
//	assert.That(commit <= last, "commit %d > last index %d", commit, last)
//	assert.Equal(got, want, "applied index")
package assert

// Package assert checks invariants and panics when one is broken.
//
// An invariant that fails is a bug in coord, not an operating error: a disk
// that fills up or a peer that stops answering is returned as an error, while
// a commit index beyond the last log index is asserted. The panic message
// names both sides so that the failure can be read from a log line alone.
//
// A check that passes must cost nothing but its test: the message is
// formatted only on the failing path, behind the invariant's own test.
//
//	if commit > last {
//		assert.Fail("commit %d > last index %d", commit, last)
//	}
//	assert.Equal(got, want, "applied index")
//
// That(cond, format, args...) reads shorter, but Go evaluates and boxes its
// args before the call, passing or not; keep it for messages without
// arguments. Tests report failures with testing.T, not with this package.
package assert

package assert_test

import (
	"fmt"

	"coord/internal/assert"
)

// A broken invariant panics with a Failure that names both sides; code that
// must report it first (a simulator printing its seed) recovers it by type.
func ExampleThat() {
	defer func() {
		if f, ok := recover().(assert.Failure); ok {
			fmt.Println(f.Error())
		}
	}()
	commit, last := uint64(7), uint64(5)
	assert.That(commit <= last, "commit %d > last index %d", commit, last)
	// Output: assertion failed: commit 7 > last index 5
}

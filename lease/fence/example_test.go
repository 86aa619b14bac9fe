package fence_test

import (
	"errors"
	"fmt"

	"coord/lease/fence"
)

// A leader paused past its lease wakes up and writes with its old token after
// its successor has written with a newer one: the resource rejects it.
func Example() {
	var r fence.Resource
	fmt.Println(r.Write(7, "old-leader"))
	fmt.Println(r.Write(8, "new-leader"))
	err := r.Write(7, "old-leader")
	fmt.Println(errors.Is(err, fence.ErrStaleToken), r.Highest())
	// Output:
	// <nil>
	// <nil>
	// true 8
}

package rafttest_test

import (
	"fmt"
	"strings"

	"coord/raft/rafttest"
)

// Example replays a small scenario (node 1 campaigns, a command commits)
// and prints the status lines of its transcript.
func Example() {
	out := rafttest.RunScript(`> bootstrap 1 2 3
> campaign 1
> stabilize
> propose 1 hello
> stabilize
> status
`)
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, " term=") && !strings.Contains(line, "->") {
			fmt.Println(line)
		}
	}
	// Output:
	// 1: leader term=2 vote=1 lead=1 commit=3 applied=3 last=3 voters=(1 2 3)
	// 2: follower term=2 vote=1 lead=1 commit=3 applied=3 last=3 voters=(1 2 3)
	// 3: follower term=2 vote=1 lead=1 commit=3 applied=3 last=3 voters=(1 2 3)
}

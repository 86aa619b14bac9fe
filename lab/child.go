package lab

import (
	"fmt"
	"os"
	"sort"
	"sync"
)

// ChildArg is the first argument that makes a binary serving lab children
// (the coord binary, or a test binary whose TestMain calls ServeChild) run one
// child instead of its usual main.
const ChildArg = "lab-child"

var (
	childrenMu sync.Mutex
	children   = map[string]func(args []string) int{}
)

// RegisterChild names a function that runs in a child process: the half of an
// experiment that may deadlock, crash or be killed. main receives the
// arguments after the name and returns the process exit code. Rung packages
// call RegisterChild from init; it panics if the name is taken.
func RegisterChild(name string, main func(args []string) int) {
	childrenMu.Lock()
	defer childrenMu.Unlock()
	if _, dup := children[name]; dup {
		panic("lab: RegisterChild called twice for " + name)
	}
	children[name] = main
}

// ServeChild runs the child the command line asks for, if os.Args[1] is
// ChildArg, and exits with its code; otherwise it returns at once.
//
// Call it first thing: in the coord binary from an init function of package
// main, in tests from TestMain. The Go runtime reports "all goroutines are
// asleep" only when no thread is left that could wake one, and os/signal's
// watcher is such a thread: a child started after signal.Notify would hang in
// its deadlock instead of reporting it.
func ServeChild() {
	if len(os.Args) < 2 || os.Args[1] != ChildArg {
		return
	}
	os.Exit(runChild(os.Args[2:]))
}

// runChild runs the named child and returns its exit code; 2 if the name is
// missing or unknown.
func runChild(args []string) int {
	if len(args) < 1 {
		fmt.Fprintf(os.Stderr, "%s: missing child name (known: %v)\n", ChildArg, childNames())
		return 2
	}
	childrenMu.Lock()
	main, ok := children[args[0]]
	childrenMu.Unlock()
	if !ok {
		fmt.Fprintf(os.Stderr, "%s: unknown child %q (known: %v)\n", ChildArg, args[0], childNames())
		return 2
	}
	return main(args[1:])
}

func childNames() []string {
	childrenMu.Lock()
	defer childrenMu.Unlock()
	names := make([]string, 0, len(children))
	for n := range children {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

package leasekittest

import (
	"fmt"
	"os"
	"testing"

	"coord/lease/leasetest"
)

// MainWithCoord is the body of TestMain for a package whose tests run the
// coord command (leasetest.RunProcesses): it builds coord into a temporary
// directory (leasetest.BuildCoord, once: the build takes seconds), stores
// the binary's path in *bin, runs the tests, removes the directory and
// returns the exit code:
//
//	var coordBin string
//
//	func TestMain(m *testing.M) { os.Exit(leasekittest.MainWithCoord(m, &coordBin)) }
//
// A failed build fails the whole package with the compiler's output.
func MainWithCoord(m *testing.M, bin *string) int {
	dir, err := os.MkdirTemp("", "coord-test-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "leasekittest: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = leasetest.BuildCoord(dir); err != nil {
		fmt.Fprintf(os.Stderr, "leasekittest: %v\n", err)
		return 1
	}
	return m.Run()
}

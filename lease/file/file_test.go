package file_test

import (
	"path/filepath"
	"testing"

	"coord/lease"
	"coord/lease/file"
	"coord/lease/leasetest"
)

// openIn returns a newBackend function for leasetest: every Backend it
// opens shares dir.
func openIn(dir string) func(t *testing.T) lease.Backend {
	return func(t *testing.T) lease.Backend {
		b, err := file.Open(filepath.Join(dir, "leader.lock"), file.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

func TestConformance(t *testing.T) {
	leasetest.Run(t, openIn(t.TempDir()))
}

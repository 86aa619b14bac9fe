//go:build !linux

package file_test

import (
	"context"
	"errors"
	"testing"

	"coord/lease"
	"coord/lease/file"
)

// TestOpenSaysLinuxOnly checks that a file:// URL names the reason it
// cannot be opened here, rather than being an unknown scheme.
func TestOpenSaysLinuxOnly(t *testing.T) {
	_, err := lease.Open(context.Background(), "file://"+t.TempDir()+"/leader.lock")
	if !errors.Is(err, file.ErrNeedsLinux) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Open(file://...) = %v, want ErrNeedsLinux wrapping errors.ErrUnsupported", err)
	}
}

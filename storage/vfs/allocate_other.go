//go:build !linux

package vfs

import "fmt"

// Allocate implements WriteAtFile portably: the file is extended, sparse,
// without reserving space.
func (f osWriteAtFile) Allocate(size int64) error {
	if err := f.growTo(size); err != nil {
		return fmt.Errorf("allocate %s to %d bytes: %w", f.Name(), size, err)
	}
	return nil
}

// SyncData implements WriteAtFile with fsync: without fdatasync, the full
// sync is the safe choice.
func (f osWriteAtFile) SyncData() error { return f.Sync() }

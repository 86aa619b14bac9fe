package vfs

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Allocate implements WriteAtFile with fallocate(2), mode 0: the blocks are
// reserved and the size set, so later writes inside them need no block
// allocation and no size change in the journal. A file system without
// fallocate gets a sparse extension instead.
func (f osWriteAtFile) Allocate(size int64) error {
	err := ignoringEINTR(func() error { return unix.Fallocate(int(f.Fd()), 0, 0, size) })
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		err = f.growTo(size)
	}
	if err != nil {
		return fmt.Errorf("allocate %s to %d bytes: %w", f.Name(), size, err)
	}
	return nil
}

// SyncData implements WriteAtFile with fdatasync(2).
func (f osWriteAtFile) SyncData() error {
	if err := ignoringEINTR(func() error { return unix.Fdatasync(int(f.Fd())) }); err != nil {
		return fmt.Errorf("fdatasync %s: %w", f.Name(), err)
	}
	return nil
}

// ignoringEINTR retries a system call interrupted by a signal, as package os
// does for its own calls.
func ignoringEINTR(call func() error) error {
	for {
		if err := call(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

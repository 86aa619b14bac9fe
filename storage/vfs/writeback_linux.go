package vfs

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// WriteBack starts writing what was written to f to the disk and
// waits for the writeback it started last time to end, so that a file
// written in one long stream (a snapshot) never holds more than about
// two calls' worth of dirty pages: flushed all at once by its final
// fsync, they would delay every other file's fsync behind them (ext4's
// ordered mode flushes them before the journal commit that another file's
// fdatasync waits for). It makes nothing durable: the file still needs
// Sync. On the OS file system it is sync_file_range(2) (what RocksDB's
// bytes_per_sync and Pebble's BytesPerSync do); on other file systems, or
// where the call is not supported, it is Sync.
func WriteBack(f File) error {
	osf, ok := f.(*os.File)
	if !ok {
		return f.Sync()
	}
	const flags = unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE
	err := ignoringEINTR(func() error { return unix.SyncFileRange(int(osf.Fd()), 0, 0, flags) })
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ESPIPE) {
		err = osf.Sync()
	}
	if err != nil {
		return fmt.Errorf("write back %s: %w", osf.Name(), err)
	}
	return nil
}

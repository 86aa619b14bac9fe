//go:build !linux

package vfs

// WriteBack makes what was written to f durable, so that a file written
// in one long stream never piles up dirty pages for its final fsync;
// without sync_file_range(2) (writeback_linux.go), it is Sync.
func WriteBack(f File) error { return f.Sync() }

package vfs

import (
	"fmt"
	"io/fs"
)

// FileSize returns the size of an open file, as it is now, without
// reading it: the snapshot store learns a file's data length so at open
// and verifies the data as it is later read, once. The files of OS
// (*os.File), MemFS and FaultFS can tell; a File of another FS that
// cannot is an error.
func FileSize(f File) (int64, error) {
	switch f := f.(type) {
	case interface{ Stat() (fs.FileInfo, error) }:
		info, err := f.Stat()
		if err != nil {
			return 0, err
		}
		return info.Size(), nil
	case interface{ Size() (int64, error) }:
		return f.Size()
	}
	return 0, fmt.Errorf("vfs: a %T cannot tell its size", f)
}

// Size returns the file's size.
func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if _, err := f.fs.begin(false); err != nil {
		return 0, err
	}
	if err := f.check("size", f.writable); err != nil {
		return 0, err
	}
	return f.node.size, nil
}

// Size returns the inner file's size; it is not a fault point.
func (f *faultFile) Size() (int64, error) { return FileSize(f.inner) }

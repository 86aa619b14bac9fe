package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// FS is the file system interface of the storage packages.
//
// Errors for a missing file or directory wrap fs.ErrNotExist. A name is
// durable (survives a crash) only after SyncDir of its directory; a file's
// data only after File.Sync. Implementations say whether they are safe for
// concurrent use; all three in this package are.
type FS interface {
	// Create creates the named file for writing, truncating it if it
	// exists. Writes append at the end of the file.
	Create(name string) (File, error)
	// OpenAppend opens an existing file for writing; writes append at the
	// end of the file, also after File.Truncate.
	OpenAppend(name string) (File, error)
	// CreateWriteAt creates the named file for writing at chosen offsets,
	// truncating it if it exists.
	CreateWriteAt(name string) (WriteAtFile, error)
	// OpenWriteAt opens an existing file for writing at chosen offsets.
	OpenWriteAt(name string) (WriteAtFile, error)
	// Open opens an existing file for reading.
	Open(name string) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// Rename renames oldname to newname, replacing newname if it is a file.
	Rename(oldname, newname string) error
	// MkdirAll creates dir and any missing parents; it succeeds if dir
	// exists already.
	MkdirAll(dir string) error
	// List returns the names of the entries in dir, sorted.
	List(dir string) ([]string, error)
	// SyncDir makes the entries of dir durable: the creations, renames and
	// removals done in it so far survive a crash.
	SyncDir(dir string) error
	// Lock takes an exclusive lock on the named file, creating it if
	// needed, so that only one process at a time uses what it guards. It
	// fails at once, with an error wrapping ErrLocked, if the lock is held.
	// Closing the returned Closer releases it; so does the holder's death
	// (or, for MemFS, a crash).
	Lock(name string) (io.Closer, error)
}

// ErrLocked means FS.Lock found the lock held by someone else.
var ErrLocked = errors.New("vfs: locked by another process")

// File is an open file. Files opened with FS.Open are read-only; files
// opened with FS.Create or FS.OpenAppend are write-only and append.
type File interface {
	io.Reader
	io.Writer
	io.Closer
	// Sync makes the file's data durable (fsync).
	Sync() error
	// Truncate changes the size of the file; like a write, the change is
	// durable only after Sync.
	Truncate(size int64) error
}

// WriteAtFile is a file open for writing at chosen offsets, into space
// allocated ahead of the writes: how the write-ahead log keeps a segment's
// size fixed, so that syncing a write need not also journal a new file size.
type WriteAtFile interface {
	io.WriterAt
	io.Closer
	// Allocate makes the file at least size bytes long; the bytes it adds
	// read as zeros. Where the file system can (fallocate(2) on Linux) it
	// reserves their space too, so that writes inside them change neither
	// the file's size nor its allocation. Like a write, it is durable only
	// after Sync or SyncData.
	Allocate(size int64) error
	// Sync makes the file's data and metadata durable (fsync).
	Sync() error
	// SyncData makes the file's data durable, with the metadata needed to
	// read it back, such as a changed size (fdatasync): cheaper than Sync
	// when the writes stayed inside allocated space.
	SyncData() error
	// Truncate changes the size of the file; like a write, the change is
	// durable only after Sync or SyncData.
	Truncate(size int64) error
}

// ReadFile reads the whole named file.
func ReadFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return data, nil
}

// Exists reports whether name exists (as a file or a directory).
func Exists(fsys FS, name string) (bool, error) {
	name = filepath.Clean(name)
	parent := filepath.Dir(name)
	if parent == name {
		return true, nil // "/" or "."
	}
	names, err := fsys.List(parent)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_, found := slices.BinarySearch(names, filepath.Base(name))
	return found, nil
}

// MkdirAllDurable creates dir and any missing parents, and syncs the parent
// of every directory it creates, so that dir survives a crash. A directory
// that exists already is not synced again.
func MkdirAllDurable(fsys FS, dir string) error {
	dir = filepath.Clean(dir)
	// Find the missing ancestors, deepest first.
	var missing []string
	for p := dir; ; p = filepath.Dir(p) {
		ok, err := Exists(fsys, p)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		missing = append(missing, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return err
	}
	// Parents first, so that each synced entry names a directory whose
	// own name is durable already.
	for i := len(missing) - 1; i >= 0; i-- {
		if err := fsys.SyncDir(filepath.Dir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}

// OS is the real file system.
var OS FS = osFS{}

type osFS struct{}

func (osFS) Create(name string) (File, error) {
	return os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
}

func (osFS) OpenAppend(name string) (File, error) {
	return os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
}

func (osFS) CreateWriteAt(name string) (WriteAtFile, error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return osWriteAtFile{f}, nil
}

func (osFS) OpenWriteAt(name string) (WriteAtFile, error) {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	return osWriteAtFile{f}, nil
}

// osWriteAtFile is a file of the real file system opened for positional
// writes; Allocate and SyncData are per platform (allocate_*.go).
type osWriteAtFile struct{ *os.File }

// growTo extends the file to size bytes, sparse, if it is shorter: the
// fallback where the file system cannot reserve space.
func (f osWriteAtFile) growTo(size int64) error {
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if info.Size() >= size {
		return nil
	}
	return f.Truncate(size)
}

func (osFS) Open(name string) (File, error) { return os.Open(name) }

func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

func (osFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }

func (osFS) List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// Lock implements FS with flock(2): the kernel releases the lock when the
// holder's descriptor closes, including when the process dies.
func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", name, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return f, nil
}

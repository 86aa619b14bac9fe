package vfs

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
)

// ErrInjected is the error a FaultFS returns for an injected failure.
var ErrInjected = errors.New("vfs: injected fault")

// OpKind names a file system operation, for choosing where to inject faults.
type OpKind uint8

// The operations a FaultFS sees.
const (
	OpCreate OpKind = iota + 1
	OpOpenAppend
	OpOpen
	OpRemove
	OpRename
	OpMkdirAll
	OpList
	OpSyncDir
	OpRead
	OpWrite
	OpSync
	OpTruncate
	OpClose
	// OpAllocate is WriteAtFile.Allocate. Files opened with CreateWriteAt
	// and OpenWriteAt report OpCreate and OpOpenAppend, their WriteAt
	// OpWrite and their SyncData OpSync, as the appending files do.
	OpAllocate
)

var opNames = [...]string{
	OpCreate: "create", OpOpenAppend: "openappend", OpOpen: "open", OpRemove: "remove",
	OpRename: "rename", OpMkdirAll: "mkdirall", OpList: "list", OpSyncDir: "syncdir",
	OpRead: "read", OpWrite: "write", OpSync: "sync", OpTruncate: "truncate", OpClose: "close",
	OpAllocate: "allocate",
}

// String returns the operation's name.
func (k OpKind) String() string {
	if int(k) < len(opNames) && opNames[k] != "" {
		return opNames[k]
	}
	return fmt.Sprintf("OpKind(%d)", k)
}

// Op is one operation seen by a FaultFS.
type Op struct {
	Kind OpKind
	// Name is the file or directory operated on (for Rename, the old name).
	Name string
	// Seq counts the operations the FaultFS has seen, from 1.
	Seq int
}

// Fault is what an Injector asks a FaultFS to do to an operation.
type Fault uint8

// The faults a FaultFS can inject.
const (
	// NoFault lets the operation through.
	NoFault Fault = iota
	// FaultError fails the operation with ErrInjected without performing it.
	FaultError
	// FaultShortWrite makes a Write write a strict prefix of its buffer (of
	// seeded length) and return ErrInjected. Other operations get FaultError.
	FaultShortWrite
	// FaultBitFlip flips one seeded bit: in the data a Write passes on (the
	// write then succeeds, as a silent media error would), or in the data a
	// Read returns. Other operations are let through.
	FaultBitFlip
	// FaultNoSpace is a full disk: a Write writes a prefix of its buffer
	// (of seeded length, maybe empty) and returns an error wrapping both
	// ErrInjected and syscall.ENOSPC, as write(2) does when the space runs
	// out mid-buffer; an Allocate fails the same way without allocating.
	// Other operations are let through: on a full disk fsync, truncate,
	// rename and remove still work.
	FaultNoSpace
)

// IsNoSpace reports whether err says the disk is full (ENOSPC), from the
// real file system or from a FaultFS.
func IsNoSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }

// NoSpace returns an Injector for a full disk: every Write and Allocate
// fails with FaultNoSpace until the injector is replaced (space returns).
func NoSpace() Injector {
	return func(op Op) Fault {
		if op.Kind == OpWrite || op.Kind == OpAllocate {
			return FaultNoSpace
		}
		return NoFault
	}
}

// Injector decides the fault for each operation. A FaultFS calls it under a
// lock, in operation order, so it may keep state.
type Injector func(op Op) Fault

// FailNth returns an Injector that injects fault into the n-th operation
// (from 1) among those of the given kinds (all kinds if none are given).
func FailNth(n int, fault Fault, kinds ...OpKind) Injector {
	seen := 0
	return func(op Op) Fault {
		if len(kinds) > 0 && !slices.Contains(kinds, op.Kind) {
			return NoFault
		}
		seen++
		if seen == n {
			return fault
		}
		return NoFault
	}
}

// Probabilistic returns an Injector that injects fault into each operation of
// the given kinds (all kinds if none are given) with probability p, drawn
// from a generator seeded with seed.
func Probabilistic(seed uint64, p float64, fault Fault, kinds ...OpKind) Injector {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	return func(op Op) Fault {
		if len(kinds) > 0 && !slices.Contains(kinds, op.Kind) {
			return NoFault
		}
		if rng.Float64() < p {
			return fault
		}
		return NoFault
	}
}

// FaultFS wraps an FS and injects the faults an Injector chooses. It is safe
// for concurrent use if the wrapped FS is.
type FaultFS struct {
	inner FS
	mu    sync.Mutex
	inj   Injector
	rng   *rand.Rand // chooses bit positions and short-write lengths
	seq   int
}

// NewFaultFS returns inner with faults injected by inj; seed chooses which
// bit a bit flip flips and how short a short write is.
func NewFaultFS(inner FS, seed uint64, inj Injector) *FaultFS {
	return &FaultFS{inner: inner, inj: inj, rng: rand.New(rand.NewPCG(seed, 0xfa17))}
}

// SetInjector replaces the Injector (nil injects nothing).
func (f *FaultFS) SetInjector(inj Injector) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inj = inj
}

// decide asks the injector about one operation.
func (f *FaultFS) decide(kind OpKind, name string) Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	if f.inj == nil {
		return NoFault
	}
	return f.inj(Op{Kind: kind, Name: name, Seq: f.seq})
}

// intN draws from the seeded generator.
func (f *FaultFS) intN(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.IntN(n)
}

func injected(kind OpKind, name string) error {
	return fmt.Errorf("%s %s: %w", kind, name, ErrInjected)
}

// fails reports whether fault makes an operation other than Read or Write
// fail.
func fails(fault Fault) bool { return fault == FaultError || fault == FaultShortWrite }

// Create implements FS.
func (f *FaultFS) Create(name string) (File, error) { return f.open(OpCreate, name, f.inner.Create) }

// OpenAppend implements FS.
func (f *FaultFS) OpenAppend(name string) (File, error) {
	return f.open(OpOpenAppend, name, f.inner.OpenAppend)
}

// CreateWriteAt implements FS.
func (f *FaultFS) CreateWriteAt(name string) (WriteAtFile, error) {
	return f.openWriteAt(OpCreate, name, f.inner.CreateWriteAt)
}

// OpenWriteAt implements FS.
func (f *FaultFS) OpenWriteAt(name string) (WriteAtFile, error) {
	return f.openWriteAt(OpOpenAppend, name, f.inner.OpenWriteAt)
}

func (f *FaultFS) openWriteAt(kind OpKind, name string, open func(string) (WriteAtFile, error)) (WriteAtFile, error) {
	if fails(f.decide(kind, name)) {
		return nil, injected(kind, name)
	}
	file, err := open(name)
	if err != nil {
		return nil, err
	}
	return &faultWriteAtFile{faultSyncCloser: faultSyncCloser{fs: f, name: name, inner: file}, inner: file}, nil
}

// Open implements FS.
func (f *FaultFS) Open(name string) (File, error) { return f.open(OpOpen, name, f.inner.Open) }

// open injects into an operation that opens a file, and wraps the file so
// that its reads, writes and syncs see faults too.
func (f *FaultFS) open(kind OpKind, name string, open func(string) (File, error)) (File, error) {
	if fails(f.decide(kind, name)) {
		return nil, injected(kind, name)
	}
	file, err := open(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{faultSyncCloser: faultSyncCloser{fs: f, name: name, inner: file}, inner: file}, nil
}

// Remove implements FS.
func (f *FaultFS) Remove(name string) error {
	if fails(f.decide(OpRemove, name)) {
		return injected(OpRemove, name)
	}
	return f.inner.Remove(name)
}

// Rename implements FS.
func (f *FaultFS) Rename(oldname, newname string) error {
	if fails(f.decide(OpRename, oldname)) {
		return injected(OpRename, oldname)
	}
	return f.inner.Rename(oldname, newname)
}

// MkdirAll implements FS.
func (f *FaultFS) MkdirAll(dir string) error {
	if fails(f.decide(OpMkdirAll, dir)) {
		return injected(OpMkdirAll, dir)
	}
	return f.inner.MkdirAll(dir)
}

// List implements FS.
func (f *FaultFS) List(dir string) ([]string, error) {
	if fails(f.decide(OpList, dir)) {
		return nil, injected(OpList, dir)
	}
	return f.inner.List(dir)
}

// SyncDir implements FS.
func (f *FaultFS) SyncDir(dir string) error {
	if fails(f.decide(OpSyncDir, dir)) {
		return injected(OpSyncDir, dir)
	}
	return f.inner.SyncDir(dir)
}

type faultFile struct {
	faultSyncCloser // fs and name, and Sync, Truncate and Close
	inner           File
}

func (f *faultFile) Read(p []byte) (int, error) {
	fault := f.fs.decide(OpRead, f.name)
	if fails(fault) {
		return 0, injected(OpRead, f.name)
	}
	n, err := f.inner.Read(p)
	if fault == FaultBitFlip && n > 0 {
		i := f.fs.intN(n * 8)
		p[i/8] ^= 1 << (i % 8)
	}
	return n, err
}

func (f *faultFile) Write(p []byte) (int, error) {
	return f.faultyWrite(p, f.inner.Write)
}

// faultyWrite writes p with write, or fails as the FaultFS decides: an
// error, a short write, a full disk after part of p, or p with one bit
// flipped. faultFile's Write and faultWriteAtFile's WriteAt share it.
func (f *faultSyncCloser) faultyWrite(p []byte, write func([]byte) (int, error)) (int, error) {
	switch f.fs.decide(OpWrite, f.name) {
	case FaultError:
		return 0, injected(OpWrite, f.name)
	case FaultShortWrite:
		if len(p) == 0 {
			return 0, injected(OpWrite, f.name)
		}
		n, err := write(p[:f.fs.intN(len(p))])
		if err != nil {
			return n, err
		}
		return n, injected(OpWrite, f.name)
	case FaultNoSpace:
		n, err := write(p[:f.fs.intN(len(p)+1)])
		if err != nil {
			return n, err
		}
		return n, fmt.Errorf("%s %s: %w: %w", OpWrite, f.name, ErrInjected, syscall.ENOSPC)
	case FaultBitFlip:
		if len(p) == 0 {
			break
		}
		flipped := slices.Clone(p) // never modify the caller's buffer
		i := f.fs.intN(len(p) * 8)
		flipped[i/8] ^= 1 << (i % 8)
		return write(flipped)
	}
	return write(p)
}

// faultSyncCloser is the Sync, Truncate and Close that faultFile and
// faultWriteAtFile share: each fails as the FaultFS decides, else goes to
// the inner file.
type faultSyncCloser struct {
	fs    *FaultFS
	name  string
	inner interface {
		Sync() error
		Truncate(size int64) error
		Close() error
	}
}

func (f *faultSyncCloser) Sync() error {
	if fails(f.fs.decide(OpSync, f.name)) {
		return injected(OpSync, f.name)
	}
	return f.inner.Sync()
}

func (f *faultSyncCloser) Truncate(size int64) error {
	if fails(f.fs.decide(OpTruncate, f.name)) {
		return injected(OpTruncate, f.name)
	}
	return f.inner.Truncate(size)
}

func (f *faultSyncCloser) Close() error {
	if fails(f.fs.decide(OpClose, f.name)) {
		// The descriptor is released anyway, as close(2) does on error.
		_ = f.inner.Close()
		return injected(OpClose, f.name)
	}
	return f.inner.Close()
}

type faultWriteAtFile struct {
	faultSyncCloser // fs and name, and Sync, Truncate and Close
	inner           WriteAtFile
}

func (f *faultWriteAtFile) WriteAt(p []byte, off int64) (int, error) {
	return f.faultyWrite(p, func(b []byte) (int, error) { return f.inner.WriteAt(b, off) })
}

func (f *faultWriteAtFile) Allocate(size int64) error {
	switch f.fs.decide(OpAllocate, f.name) {
	case FaultError, FaultShortWrite:
		return injected(OpAllocate, f.name)
	case FaultNoSpace:
		return fmt.Errorf("%s %s: %w: %w", OpAllocate, f.name, ErrInjected, syscall.ENOSPC)
	}
	return f.inner.Allocate(size)
}

func (f *faultWriteAtFile) SyncData() error {
	if fails(f.fs.decide(OpSync, f.name)) {
		return injected(OpSync, f.name)
	}
	return f.inner.SyncData()
}

// Lock implements FS. Faults are not injected into locks: a lock either is
// held or is not, and the storage reports ErrLocked as it is.
func (f *FaultFS) Lock(name string) (io.Closer, error) { return f.inner.Lock(name) }

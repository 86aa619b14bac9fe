package vfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// ErrCrashed is returned by every operation on a MemFS from its crash point
// until Crash or CrashTorn, and by files opened before a crash.
var ErrCrashed = errors.New("vfs: file system crashed")

// MemFS is an in-memory file system, safe for concurrent use, that loses on
// Crash what was not synced: file data written since the file's last Sync,
// and directory entries created, renamed or removed since the directory's
// last SyncDir. The zero value is not usable; call NewMemFS.
type MemFS struct {
	mu      sync.Mutex
	root    *memNode
	gen     uint64 // incremented by each crash; older handles fail
	ops     int    // mutating operations performed so far
	crashAt int    // the ops count at which the file system crashes; 0 for never
	crashed bool
	locks   map[string]uint64 // held locks: name -> the holder's token
	lockSeq uint64            // the last token handed out
}

// memNode is a file or a directory. The "synced" fields hold what a crash
// would keep.
type memNode struct {
	isDir bool
	// Files. A file is size bytes long: data, then zeros (an allocated
	// tail is kept as a size, not as bytes). len(data) <= size, and the
	// same for synced and syncedSize.
	data, synced     []byte
	size, syncedSize int64
	// Directories.
	entries, syncedEntries map[string]*memNode
}

func newDir() *memNode {
	return &memNode{isDir: true, entries: map[string]*memNode{}, syncedEntries: map[string]*memNode{}}
}

// NewMemFS returns an empty in-memory file system holding only the root
// directory "/", which is durable. Relative names are resolved against "/".
func NewMemFS() *MemFS { return &MemFS{root: newDir()} }

// Ops returns the number of mutating operations (Create, CreateWriteAt,
// Write, WriteAt, Allocate, Sync, SyncData, Truncate, Remove, Rename,
// MkdirAll, SyncDir) performed so far, crashes
// included. A test measures a workload with it before enumerating crash
// points.
func (m *MemFS) Ops() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ops
}

// SetCrashPoint makes the n-th mutating operation from now (n >= 1) the last
// one: it takes effect (a crashing Write reaches the page cache, a crashing
// Sync makes data durable), then the file system crashes, and that operation
// and every later one return ErrCrashed until Crash or CrashTorn decides what
// survived. n = 0 removes the crash point.
func (m *MemFS) SetCrashPoint(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n <= 0 {
		m.crashAt = 0
		return
	}
	m.crashAt = m.ops + n
}

// Crashed reports whether the crash point was reached and no Crash or
// CrashTorn has followed.
func (m *MemFS) Crashed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.crashed
}

// Crash simulates a power loss: every file keeps only its synced data and
// every directory only its synced entries. Files opened before the crash
// return ErrCrashed. The crash point is cleared.
func (m *MemFS) Crash() { m.crash(nil) }

// CrashTorn simulates a power loss after which some unsynced state made it
// to disk anyway, chosen by rng: each file keeps its synced data or a prefix
// of its current data beyond what it shares with the synced data (sometimes
// with the end of that prefix zeroed, as when a file's size reached the disk
// before its data; where the synced file was longer, its bytes after the
// prefix stay, as an allocated file's zeros do under writes that did not
// reach the disk), and each directory keeps either its synced or its
// current entries. What was synced is never lost.
func (m *MemFS) CrashTorn(rng *rand.Rand) { m.crash(rng) }

func (m *MemFS) crash(rng *rand.Rand) {
	m.mu.Lock()
	defer m.mu.Unlock()
	visited := map[*memNode]bool{}
	var walk func(n *memNode)
	walk = func(n *memNode) {
		if visited[n] {
			return
		}
		visited[n] = true
		if !n.isDir {
			n.data, n.size = tornFile(n, rng)
			n.synced, n.syncedSize = bytes.Clone(n.data), n.size
			return
		}
		chosen := n.syncedEntries
		if rng != nil && rng.IntN(2) == 0 {
			chosen = n.entries
		}
		n.entries = maps.Clone(chosen)
		n.syncedEntries = maps.Clone(chosen)
		// Sorted, so that one seed always tears the same way.
		for _, name := range slices.Sorted(maps.Keys(n.entries)) {
			walk(n.entries[name])
		}
	}
	walk(m.root)
	m.locks = nil // the processes that held them died with the crash
	m.gen++
	m.crashAt = 0
	m.crashed = false
}

// tornFile returns what a crash leaves of file n: its data and size. With
// rng nil, exactly what was synced.
func tornFile(n *memNode, rng *rand.Rand) ([]byte, int64) {
	synced, data := n.synced, n.data
	if rng == nil || rng.IntN(4) == 0 {
		return bytes.Clone(synced), n.syncedSize
	}
	p := commonPrefix(synced, data)
	k := p + rng.IntN(len(data)-p+1)
	out := bytes.Clone(data[:k])
	if k > p && rng.IntN(3) == 0 {
		z := 1 + rng.IntN(k-p)
		clear(out[k-z:])
	}
	if len(data) >= len(synced) && k < len(synced) {
		// Writes over synced bytes reached the disk only up to k.
		out = append(out, synced[k:]...)
	}
	// A size change reaches the disk or not; a shrink that did not is
	// seen as what was written reaching the disk only up to k.
	size := max(int64(k), min(n.syncedSize, n.size), int64(len(out)))
	return out, size
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// begin starts an operation: it fails if the file system has crashed and,
// for a mutating operation, counts it and reports whether it is the crash
// point (the operation then takes effect and returns ErrCrashed).
func (m *MemFS) begin(mutating bool) (crashNow bool, err error) {
	if m.crashed {
		return false, ErrCrashed
	}
	if !mutating {
		return false, nil
	}
	m.ops++
	if m.crashAt > 0 && m.ops >= m.crashAt {
		m.crashed = true
		return true, nil
	}
	return false, nil
}

// finish turns the result of an operation that was the crash point into
// ErrCrashed.
func finish(crashNow bool, err error) error {
	if crashNow {
		return ErrCrashed
	}
	return err
}

func memPath(name string) string { return filepath.Clean("/" + name) }

func pathError(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: name, Err: err}
}

var (
	errNotDir   = errors.New("not a directory")
	errIsDir    = errors.New("is a directory")
	errNotEmpty = errors.New("directory not empty")
)

// lookup returns the node at name.
func (m *MemFS) lookup(op, name string) (*memNode, error) {
	p := memPath(name)
	n := m.root
	if p == "/" {
		return n, nil
	}
	for _, part := range strings.Split(p[1:], "/") {
		if !n.isDir {
			return nil, pathError(op, name, errNotDir)
		}
		next, ok := n.entries[part]
		if !ok {
			return nil, pathError(op, name, fs.ErrNotExist)
		}
		n = next
	}
	return n, nil
}

// lookupParent returns the directory that holds name, and name's base.
func (m *MemFS) lookupParent(op, name string) (*memNode, string, error) {
	p := memPath(name)
	if p == "/" {
		return nil, "", pathError(op, name, fs.ErrInvalid)
	}
	dir, err := m.lookup(op, filepath.Dir(p))
	if err != nil {
		return nil, "", err
	}
	if !dir.isDir {
		return nil, "", pathError(op, name, errNotDir)
	}
	return dir, filepath.Base(p), nil
}

// Create implements FS.
func (m *MemFS) Create(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	crashNow, err := m.begin(true)
	if err != nil {
		return nil, err
	}
	f, err := m.create(name)
	if err = finish(crashNow, err); err != nil {
		return nil, err
	}
	return f, nil
}

func (m *MemFS) create(name string) (File, error) {
	dir, base, err := m.lookupParent("create", name)
	if err != nil {
		return nil, err
	}
	n, ok := dir.entries[base]
	switch {
	case ok && n.isDir:
		return nil, pathError("create", name, errIsDir)
	case ok:
		n.data, n.size = nil, 0
	default:
		n = &memNode{}
		dir.entries[base] = n
	}
	return &memFile{fs: m, node: n, gen: m.gen, name: name, writable: true}, nil
}

// CreateWriteAt implements FS.
func (m *MemFS) CreateWriteAt(name string) (WriteAtFile, error) {
	f, err := m.Create(name)
	if err != nil {
		return nil, err
	}
	return f.(*memFile), nil
}

// OpenWriteAt implements FS.
func (m *MemFS) OpenWriteAt(name string) (WriteAtFile, error) {
	f, err := m.open("openwriteat", name, true)
	if err != nil {
		return nil, err
	}
	return f.(*memFile), nil
}

// OpenAppend implements FS.
func (m *MemFS) OpenAppend(name string) (File, error) { return m.open("openappend", name, true) }

// Open implements FS.
func (m *MemFS) Open(name string) (File, error) { return m.open("open", name, false) }

func (m *MemFS) open(op, name string, writable bool) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.begin(false); err != nil {
		return nil, err
	}
	n, err := m.lookup(op, name)
	if err != nil {
		return nil, err
	}
	if n.isDir {
		return nil, pathError(op, name, errIsDir)
	}
	return &memFile{fs: m, node: n, gen: m.gen, name: name, writable: writable}, nil
}

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	crashNow, err := m.begin(true)
	if err != nil {
		return err
	}
	return finish(crashNow, m.remove(name))
}

func (m *MemFS) remove(name string) error {
	dir, base, err := m.lookupParent("remove", name)
	if err != nil {
		return err
	}
	n, ok := dir.entries[base]
	if !ok {
		return pathError("remove", name, fs.ErrNotExist)
	}
	if n.isDir && len(n.entries) > 0 {
		return pathError("remove", name, errNotEmpty)
	}
	delete(dir.entries, base)
	return nil
}

// Rename implements FS.
func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	crashNow, err := m.begin(true)
	if err != nil {
		return err
	}
	return finish(crashNow, m.rename(oldname, newname))
}

func (m *MemFS) rename(oldname, newname string) error {
	oldDir, oldBase, err := m.lookupParent("rename", oldname)
	if err != nil {
		return err
	}
	n, ok := oldDir.entries[oldBase]
	if !ok {
		return pathError("rename", oldname, fs.ErrNotExist)
	}
	newDir, newBase, err := m.lookupParent("rename", newname)
	if err != nil {
		return err
	}
	if target, ok := newDir.entries[newBase]; ok && target.isDir {
		return pathError("rename", newname, errIsDir)
	}
	delete(oldDir.entries, oldBase)
	newDir.entries[newBase] = n
	return nil
}

// MkdirAll implements FS.
func (m *MemFS) MkdirAll(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	crashNow, err := m.begin(true)
	if err != nil {
		return err
	}
	return finish(crashNow, m.mkdirAll(dir))
}

func (m *MemFS) mkdirAll(dir string) error {
	p := memPath(dir)
	n := m.root
	if p == "/" {
		return nil
	}
	for _, part := range strings.Split(p[1:], "/") {
		next, ok := n.entries[part]
		switch {
		case !ok:
			next = newDir()
			n.entries[part] = next
		case !next.isDir:
			return pathError("mkdir", dir, errNotDir)
		}
		n = next
	}
	return nil
}

// List implements FS.
func (m *MemFS) List(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.begin(false); err != nil {
		return nil, err
	}
	n, err := m.lookup("list", dir)
	if err != nil {
		return nil, err
	}
	if !n.isDir {
		return nil, pathError("list", dir, errNotDir)
	}
	return slices.Sorted(maps.Keys(n.entries)), nil
}

// SyncDir implements FS.
func (m *MemFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	crashNow, err := m.begin(true)
	if err != nil {
		return err
	}
	n, err := m.lookup("syncdir", dir)
	if err == nil && !n.isDir {
		err = pathError("syncdir", dir, errNotDir)
	}
	if err == nil {
		n.syncedEntries = maps.Clone(n.entries)
	}
	return finish(crashNow, err)
}

// memFile is an open MemFS file.
type memFile struct {
	fs       *MemFS
	node     *memNode
	gen      uint64
	name     string
	writable bool
	offset   int // read offset
	closed   bool
}

// check validates the handle for an operation, under fs.mu.
func (f *memFile) check(op string, write bool) error {
	switch {
	case f.closed:
		return pathError(op, f.name, fs.ErrClosed)
	case f.gen != f.fs.gen:
		return pathError(op, f.name, ErrCrashed)
	case write != f.writable:
		return pathError(op, f.name, fs.ErrPermission)
	}
	return nil
}

func (f *memFile) Read(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if _, err := f.fs.begin(false); err != nil {
		return 0, err
	}
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	node := f.node
	if int64(f.offset) >= node.size {
		return 0, io.EOF
	}
	var n int
	if f.offset < len(node.data) {
		n = copy(p, node.data[f.offset:])
	} else {
		n = int(min(int64(len(p)), node.size-int64(f.offset)))
		clear(p[:n])
	}
	f.offset += n
	return n, nil
}

// materialize turns the zeros after a file's data, up to end, into bytes.
func (n *memNode) materialize(end int64) {
	if int64(len(n.data)) < end {
		n.data = append(n.data, make([]byte, end-int64(len(n.data)))...)
	}
}

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	crashNow, err := f.fs.begin(true)
	if err != nil {
		return 0, err
	}
	if err := f.check("write", true); err != nil {
		return 0, finish(crashNow, err)
	}
	n := f.node
	n.materialize(n.size)
	n.data = append(n.data, p...)
	n.size = int64(len(n.data))
	if crashNow {
		return 0, ErrCrashed
	}
	return len(p), nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	crashNow, err := f.fs.begin(true)
	if err != nil {
		return 0, err
	}
	if err := f.check("write", true); err != nil {
		return 0, finish(crashNow, err)
	}
	if off < 0 {
		return 0, finish(crashNow, pathError("write", f.name, fs.ErrInvalid))
	}
	n := f.node
	end := off + int64(len(p))
	n.materialize(end)
	copy(n.data[off:end], p)
	n.size = max(n.size, end)
	if crashNow {
		return 0, ErrCrashed
	}
	return len(p), nil
}

func (f *memFile) Allocate(size int64) error {
	return f.resize("allocate", size, func(n *memNode) { n.size = max(n.size, size) })
}

// resize runs a size change (Allocate, Truncate) the way every mutating
// call runs: under the lock, counted towards a planned crash, on an open
// writable file, with a size that is not negative.
func (f *memFile) resize(op string, size int64, change func(n *memNode)) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	crashNow, err := f.fs.begin(true)
	if err != nil {
		return err
	}
	if err := f.check(op, true); err != nil {
		return finish(crashNow, err)
	}
	if size < 0 {
		return finish(crashNow, pathError(op, f.name, fs.ErrInvalid))
	}
	change(f.node)
	return finish(crashNow, nil)
}

// SyncData is Sync: a MemFS keeps no metadata that fdatasync would skip.
func (f *memFile) SyncData() error { return f.Sync() }

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	crashNow, err := f.fs.begin(true)
	if err != nil {
		return err
	}
	if err := f.check("sync", true); err != nil {
		return finish(crashNow, err)
	}
	n := f.node
	if bytes.HasPrefix(n.data, n.synced) {
		// synced never shares memory with data, so it can grow in place.
		n.synced = append(n.synced, n.data[len(n.synced):]...)
	} else {
		n.synced = bytes.Clone(n.data)
	}
	n.syncedSize = n.size
	return finish(crashNow, nil)
}

func (f *memFile) Truncate(size int64) error {
	return f.resize("truncate", size, func(n *memNode) {
		if int(size) <= len(n.data) {
			n.data = n.data[:size]
		}
		n.size = size
	})
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathError("close", f.name, fs.ErrClosed)
	}
	f.closed = true
	return nil
}

// Lock implements FS. Locks live in memory, not in files: a crash releases
// them all, as the death of the processes holding them would.
func (m *MemFS) Lock(name string) (io.Closer, error) {
	name = memPath(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, held := m.locks[name]; held {
		return nil, pathError("lock", name, ErrLocked)
	}
	if m.locks == nil {
		m.locks = map[string]uint64{}
	}
	m.lockSeq++
	m.locks[name] = m.lockSeq
	return &memLock{m: m, name: name, token: m.lockSeq}, nil
}

// ReleaseLocks releases every lock, as the death of the processes holding
// them would, without a crash: what they wrote stays, synced or not, as it
// stays in a machine's page cache when only a process dies.
func (m *MemFS) ReleaseLocks() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.locks = nil
}

// memLock is a lock held in a MemFS. Its token tells it from a later
// holder's lock of the same name.
type memLock struct {
	m     *MemFS
	name  string
	token uint64
	once  sync.Once
}

// Close releases the lock, unless a crash or ReleaseLocks released it
// already (it then leaves a later holder's lock alone).
func (l *memLock) Close() error {
	l.once.Do(func() {
		l.m.mu.Lock()
		defer l.m.mu.Unlock()
		if token, held := l.m.locks[l.name]; held && token == l.token {
			delete(l.m.locks, l.name)
		}
	})
	return nil
}

package file

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"coord/lease"

	"golang.org/x/sys/unix"
)

func init() { lease.Register("file", openURL) }

// openURL opens file:///path/to/leader.lock.
func openURL(_ context.Context, u *url.URL) (lease.Backend, error) {
	if u.Host != "" && u.Host != "localhost" {
		return nil, fmt.Errorf("%w: store URL %q: the file backend works on this machine only; host %q is not allowed", lease.ErrInvalid, u.Redacted(), u.Host)
	}
	if u.Path == "" {
		return nil, fmt.Errorf("%w: store URL %q has no path (want file:///path/to/leader.lock)", lease.ErrInvalid, u.Redacted())
	}
	return Open(u.Path, Options{})
}

// Options are the file backend's optional settings.
type Options struct {
	// Logger receives repairs and other diagnostics; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Backend is the file backend: one lock file per lease name in one
// directory. It is safe for concurrent use, and many Backends, in one
// process or many, may share a directory.
type Backend struct {
	dir         string
	defaultName string
	log         *slog.Logger
	bootID      string
	dirFD       *os.File // anchors socket paths too long for a socket address

	closed chan struct{} // closed by Close
	wg     sync.WaitGroup

	mu       sync.Mutex
	isClosed bool
	tenures  map[tenureKey]*tenure
	notify   *notifier
}

// maxNameLen bounds lease names: a name is a file name, and the tenure
// socket's path (which contains it) must fit in a unix socket address.
const maxNameLen = 64

// Filesystem magic numbers (statfs f_type) of network filesystems, on which
// flock, rename and unix sockets do not give this backend's guarantees.
var networkFS = map[int64]string{
	0x6969:     "NFS",
	0x517B:     "SMB",
	0xFF534D42: "CIFS",
	0xFE534D42: "SMB2",
	0x65735546: "FUSE", // sshfs and friends: semantics unknown
	0x01021997: "9P",
}

// Open opens the lock file at path, which must be absolute. Its directory
// must exist and be writable, on a local filesystem. The lock file's base
// name is the Backend's default lease name (DefaultName); other names are
// other lock files in the same directory. Open writes nothing: a failed
// Open leaves nothing behind.
func Open(path string, opts Options) (*Backend, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%w: lock file %q: path is not absolute", lease.ErrInvalid, path)
	}
	path = filepath.Clean(path)
	dir, name := filepath.Split(path)
	dir = filepath.Clean(dir)
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("lock file %q: %w", path, err)
	}
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	if info, err := os.Lstat(path); err == nil && !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: lock file %s exists and is not a regular file (%v)", lease.ErrInvalid, path, info.Mode().Type())
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return nil, fmt.Errorf("lease/file: read boot id: %w", err)
	}
	dirFD, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: directory %s: %v", lease.ErrInvalid, dir, err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Backend{
		dir:         dir,
		defaultName: name,
		log:         logger,
		bootID:      strings.TrimSpace(string(boot)),
		dirFD:       dirFD,
		closed:      make(chan struct{}),
		tenures:     map[tenureKey]*tenure{},
	}, nil
}

// checkDir checks that dir is a writable directory on a local filesystem,
// by creating and removing a probe file (permission bits do not stop root,
// a read-only mount does).
func checkDir(dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%w: directory %s: %v", lease.ErrInvalid, dir, errors.Unwrap(err))
	}
	if !info.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", lease.ErrInvalid, dir)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil {
		if fsName, bad := networkFS[int64(st.Type)]; bad {
			return fmt.Errorf("%w: directory %s is on %s; the file backend needs a local filesystem (see the NFS caveat in lease/file's doc)", lease.ErrInvalid, dir, fsName)
		}
	}
	probe, err := os.CreateTemp(dir, ".coord-probe-*")
	if err != nil {
		return fmt.Errorf("%w: directory %s is not writable: %v", lease.ErrInvalid, dir, errors.Unwrap(err))
	}
	probe.Close()
	if err := os.Remove(probe.Name()); err != nil {
		return fmt.Errorf("lease/file: remove probe %s: %w", probe.Name(), err)
	}
	return nil
}

// checkName checks that name can be a lock file's name in the directory.
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty lease name", lease.ErrInvalid)
	case len(name) > maxNameLen:
		return fmt.Errorf("%w: lease name %q is longer than %d bytes", lease.ErrInvalid, name, maxNameLen)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("%w: lease name %q starts with a dot (reserved for the backend's own files)", lease.ErrInvalid, name)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("%w: lease name %q contains a slash or NUL", lease.ErrInvalid, name)
	}
	return nil
}

// checkArgs validates the arguments common to the operations.
func checkArgs(name, holder string, ttl time.Duration, token uint64, op string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if holder == "" || len(holder) > maxHolder {
		return fmt.Errorf("%w: %s: holder %q must be 1 to %d bytes", lease.ErrInvalid, op, holder, maxHolder)
	}
	if op == "acquire" || op == "renew" {
		if ttl <= 0 {
			return fmt.Errorf("%w: %s: ttl %v is not positive", lease.ErrInvalid, op, ttl)
		}
	}
	if op != "acquire" && token == 0 {
		return fmt.Errorf("%w: %s: zero token", lease.ErrInvalid, op)
	}
	return nil
}

// DefaultName returns the base name of the lock file Open was given: the
// lease name the commands use when none is given.
func (b *Backend) DefaultName() string { return b.defaultName }

// Dir returns the directory of the lock files.
func (b *Backend) Dir() string { return b.dir }

// Paths of the files of one lease name (see the package doc).
func (b *Backend) lockPath(name string) string  { return filepath.Join(b.dir, name) }
func (b *Backend) guardPath(name string) string { return filepath.Join(b.dir, "."+name+".guard") }
func sockBase(name string, token uint64) string {
	return "." + name + "." + strconv.FormatUint(token, 10) + ".sock"
}

// sockPath returns an address for the tenure socket of token. A unix socket
// address holds at most 107 bytes; a longer path goes through the
// directory's open descriptor instead.
func (b *Backend) sockPath(name string, token uint64) string {
	full := filepath.Join(b.dir, sockBase(name, token))
	if len(full) < 100 {
		return full
	}
	return "/proc/self/fd/" + strconv.Itoa(int(b.dirFD.Fd())) + "/" + sockBase(name, token)
}

// Acquire implements lease.Backend.
func (b *Backend) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (lease.Record, error) {
	if err := checkArgs(name, holder, ttl, 0, "acquire"); err != nil {
		return lease.Record{}, err
	}
	start := time.Now()
	var rec lease.Record
	err := b.withGuard(ctx, name, func(g *os.File) error {
		st, err := b.readState(name, g)
		if err != nil {
			return err
		}
		v := b.assess(name, st, lease.MonotonicNow())
		if v.held() {
			if err := b.repair(name, v); err != nil {
				return err
			}
			rec = v.record(name)
			return fmt.Errorf("lease/file: acquire %q: %w (by %q, token %d)", name, lease.ErrHeld, v.holder, v.token)
		}
		if v.problem != "" {
			b.log.Warn("lease/file: repairing lock file", "lease", name, "problem", v.problem, "token", v.token)
		}
		last := v.token
		if !st.haveSlot || st.slot.Boot != b.bootID {
			// The tenure slot may have lost writes in a machine crash
			// (it is not fsynced); the reservation has not.
			last = max(last, st.reserve.Reserved)
		}
		token := last + 1
		if token > st.reserve.Reserved {
			r := reserveSlot{Seq: st.reserve.Seq + 1, Reserved: token + reserveBatch - 1}
			if err := writeSlot(g, reserveSlotsAt+int64(r.Seq%2)*slotSize, encodeSlot(reserveMagic, r), true); err != nil {
				return err
			}
		}
		t, err := b.listen(name, token)
		if err != nil {
			return err
		}
		slot := guardSlot{Seq: st.slot.Seq + 1, Token: token, Holder: holder, PID: os.Getpid(), TTLNS: int64(ttl), Boot: b.bootID}
		if err := writeSlot(g, tenureSlotsAt+int64(slot.Seq%2)*slotSize, encodeSlot(slotMagic, slot), false); err != nil {
			t.end()
			return err
		}
		fr := fileRecord{Name: name, Holder: holder, Token: token, PID: os.Getpid(), Boot: b.bootID,
			ExpiresMonoNS: lease.MonotonicNow() + int64(ttl), TTLNS: int64(ttl)}
		if err := b.writeRecord(fr); err != nil {
			t.end()
			return err
		}
		b.removeLeftovers(name, token)
		b.addTenure(name, token, t)
		rec = lease.Record{Name: name, Holder: holder, Token: token, Expiry: start.Add(ttl)}
		return nil
	})
	return rec, err
}

// Renew implements lease.Backend.
func (b *Backend) Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (lease.Record, error) {
	if err := checkArgs(name, holder, ttl, token, "renew"); err != nil {
		return lease.Record{}, err
	}
	start := time.Now()
	var rec lease.Record
	err := b.withGuard(ctx, name, func(g *os.File) error {
		st, err := b.readState(name, g)
		if err != nil {
			return err
		}
		v := b.assess(name, st, lease.MonotonicNow())
		if !v.held() || v.token != token || v.holder != holder {
			// A stale holder changes nothing: it neither overwrites nor
			// deletes the new holder's record.
			if v.token != token || v.holder == holder {
				b.endTenure(name, token) // the tenure of token is over
			}
			if err := b.repair(name, v); err != nil {
				return err
			}
			rec = v.record(name)
			return fmt.Errorf("lease/file: renew %q token %d: %w (%s)", name, token, lease.ErrLost, v.describe())
		}
		if v.problem != "" {
			b.log.Warn("lease/file: repairing lock file", "lease", name, "problem", v.problem, "token", v.token)
		}
		fr := fileRecord{Name: name, Holder: holder, Token: token, PID: v.pid, Boot: b.bootID,
			ExpiresMonoNS: lease.MonotonicNow() + int64(ttl), TTLNS: int64(ttl)}
		if err := b.writeRecord(fr); err != nil {
			return err
		}
		rec = lease.Record{Name: name, Holder: holder, Token: token, Expiry: start.Add(ttl)}
		return nil
	})
	return rec, err
}

// Release implements lease.Backend.
func (b *Backend) Release(ctx context.Context, name, holder string, token uint64) error {
	if err := checkArgs(name, holder, 0, token, "release"); err != nil {
		return err
	}
	return b.withGuard(ctx, name, func(g *os.File) error {
		st, err := b.readState(name, g)
		if err != nil {
			return err
		}
		v := b.assess(name, st, lease.MonotonicNow())
		if v.token != token || v.holder != holder || v.status == statusReleased {
			if v.token != token || v.holder == holder || v.status == statusReleased {
				b.endTenure(name, token) // the tenure of token is over
			}
			return fmt.Errorf("lease/file: release %q token %d: %w (%s)", name, token, lease.ErrLost, v.describe())
		}
		// Write the free record before closing the tenure socket, so that
		// a watcher woken by the socket reads "released", not "dead".
		fr := fileRecord{Name: name, Token: token, Boot: b.bootID}
		err = b.writeRecord(fr)
		b.endTenure(name, token)
		return err
	})
}

// Get implements lease.Backend. It reads without the guard lock, and takes
// it only to repair a damaged lock file.
func (b *Backend) Get(ctx context.Context, name string) (lease.Record, error) {
	v, err := b.view(ctx, name)
	if err != nil {
		return lease.Record{}, err
	}
	return v.record(name), nil
}

// view returns the assessed state of name, repairing the lock file (under
// the guard) if it needs it.
func (b *Backend) view(ctx context.Context, name string) (view, error) {
	if err := checkName(name); err != nil {
		return view{}, err
	}
	if b.isClosedNow() {
		return view{}, fmt.Errorf("lease/file: get %q: %w", name, lease.ErrClosed)
	}
	st, err := b.readState(name, nil)
	if err != nil {
		return view{}, err
	}
	v := b.assess(name, st, lease.MonotonicNow())
	if v.problem == "" {
		return v, nil
	}
	err = b.withGuard(ctx, name, func(g *os.File) error {
		st, err := b.readState(name, g)
		if err != nil {
			return err
		}
		v = b.assess(name, st, lease.MonotonicNow())
		return b.repair(name, v)
	})
	return v, err
}

// Close implements lease.Backend. Held leases are not released: their
// tenure sockets close, so to every other process the holders died.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.isClosed {
		b.mu.Unlock()
		return nil
	}
	b.isClosed = true
	close(b.closed)
	tenures := b.tenures
	b.tenures = map[tenureKey]*tenure{}
	n := b.notify
	b.mu.Unlock()
	for _, t := range tenures {
		t.end()
	}
	if n != nil {
		n.close()
	}
	b.wg.Wait()
	return b.dirFD.Close()
}

func (b *Backend) isClosedNow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.isClosed
}

// withGuard runs fn holding the exclusive flock of name's guard file. The
// lock is taken without blocking the thread (LOCK_NB and short backoff), so
// that ctx bounds the wait: a process stopped inside its critical section
// (SIGSTOP, about a millisecond of exposure per operation) delays everyone
// until it continues or dies, and operations meanwhile fail with
// ErrUnavailable instead of hanging.
func (b *Backend) withGuard(ctx context.Context, name string, fn func(g *os.File) error) error {
	if b.isClosedNow() {
		return fmt.Errorf("lease/file: %q: %w", name, lease.ErrClosed)
	}
	g, err := os.OpenFile(b.guardPath(name), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("lease/file: open guard of %q: %w: %v", name, lease.ErrUnavailable, err)
	}
	defer g.Close() // closing the descriptor releases the flock
	backoff := 20 * time.Microsecond
	for {
		err := unix.Flock(int(g.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("lease/file: flock guard of %q: %w: %v", name, lease.ErrUnavailable, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lease/file: guard of %q busy: %w: %v", name, lease.ErrUnavailable, ctx.Err())
		case <-b.closed:
			return fmt.Errorf("lease/file: %q: %w", name, lease.ErrClosed)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Millisecond)
	}
	return fn(g)
}

// state is what the files of one lease name hold.
type state struct {
	slot     guardSlot // highest valid tenure slot (zero if none)
	haveSlot bool
	reserve  reserveSlot // highest valid reservation slot (zero if none)
	rec      fileRecord  // the lock file's record, if recErr is nil
	recErr   error       // fs.ErrNotExist, errFormat, or an I/O error
}

// readState reads the guard slots (from g, or from the guard file without
// locking when g is nil) and the lock file.
func (b *Backend) readState(name string, g *os.File) (state, error) {
	var st state
	buf := make([]byte, guardSize)
	var n int
	var err error
	if g != nil {
		n, err = g.ReadAt(buf, 0)
	} else {
		var f *os.File
		f, err = os.Open(b.guardPath(name))
		if err == nil {
			n, err = f.ReadAt(buf, 0)
			f.Close()
		}
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, io.EOF) {
		return st, fmt.Errorf("lease/file: read guard of %q: %w: %v", name, lease.ErrUnavailable, err)
	}
	buf = buf[:n]
	st.slot, st.haveSlot = decodeSlots(buf[:min(n, reserveSlotsAt)], slotMagic, func(s guardSlot) uint64 { return s.Seq })
	var haveReserve bool
	if n > reserveSlotsAt {
		st.reserve, haveReserve = decodeSlots(buf[reserveSlotsAt:], reserveMagic, func(s reserveSlot) uint64 { return s.Seq })
	}
	// A lock-free reader (g == nil) may catch a slot mid-write; only a
	// reader holding the guard sees real damage.
	if g != nil && n > 0 && (!st.haveSlot || !haveReserve) {
		b.log.Error("lease/file: guard file damaged; last token taken from what survives, the lock file and the sockets",
			"lease", name, "path", b.guardPath(name), "tenure_slot", st.haveSlot, "reservation", haveReserve)
		st.slot.Token = max(st.slot.Token, b.maxSocketToken(name))
	}
	data, err := os.ReadFile(b.lockPath(name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		st.recErr = fs.ErrNotExist
	case err != nil:
		st.recErr = err
	default:
		st.recErr = decodeLine(recordMagic, data, &st.rec)
		if st.recErr == nil && st.rec.Name != name {
			st.recErr = fmt.Errorf("%w: record names lease %q", errFormat, st.rec.Name)
		}
	}
	return st, nil
}

// writeSlot writes one encoded guard slot at off, and fsyncs the guard when
// sync is set (reservations: durable before any token they cover is used).
func writeSlot(g *os.File, off int64, slot []byte, sync bool) error {
	if _, err := g.WriteAt(slot, off); err != nil {
		return fmt.Errorf("lease/file: write guard: %w: %v", lease.ErrUnavailable, err)
	}
	if !sync {
		return nil
	}
	if err := g.Sync(); err != nil {
		return fmt.Errorf("lease/file: sync guard: %w: %v", lease.ErrUnavailable, err)
	}
	return nil
}

// writeRecord replaces the lock file atomically: write a temporary file,
// swap it with the lock file, remove the temporary name (which then holds
// the old record). Other processes see the old record or the new one, never
// an empty or partial one. Callers hold the guard.
//
// The swap is renameat2(RENAME_EXCHANGE), not a rename over the lock file:
// ext4 treats a rename that replaces a file as an application's
// replace-via-rename and writes the new file's data back first
// (auto_da_alloc), which cost 0.3 ms at the median and several ms under
// load on every record here, against 15 us for an exchange and an unlink.
// Where there is nothing to exchange with (the first record) or the file
// system cannot exchange, it falls back to rename.
//
// Neither the file nor the directory is fsynced, on purpose: a lock file
// matters only within one boot (after a reboot its boot id makes it
// expired), and within a boot the page cache is what every process reads.
// A machine crash can leave it stale, empty or garbage; the next operation
// repairs it. The one durable fact, the token high-water mark, lives in the
// guard and is fsynced before a token is used (writeSlot). This keeps an
// acquisition to one fsync and a renewal or release to none.
func (b *Backend) writeRecord(r fileRecord) error {
	r.Written = time.Now().UTC()
	tmp, err := os.CreateTemp(b.dir, "."+r.Name+".tmp-*")
	if err != nil {
		return fmt.Errorf("lease/file: create temporary record: %w: %v", lease.ErrUnavailable, err)
	}
	_, werr := tmp.Write(encodeLine(recordMagic, r))
	if werr == nil {
		werr = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = replace(tmp.Name(), b.lockPath(r.Name))
	}
	os.Remove(tmp.Name()) // the old record after an exchange; nothing after a rename
	if werr != nil {
		return fmt.Errorf("lease/file: write record of %q: %w: %v", r.Name, lease.ErrUnavailable, werr)
	}
	return nil
}

// replace puts the file at tmp in place of the file at path, atomically: by
// exchanging the two where the file system can, else by renaming.
func replace(tmp, path string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_EXCHANGE)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP):
		// No lock file yet, or no RENAME_EXCHANGE here.
		return os.Rename(tmp, path)
	default:
		return err
	}
}

// repair rewrites the lock file when v says it is damaged or stale, and
// logs why. Callers hold the guard.
func (b *Backend) repair(name string, v view) error {
	if v.problem == "" {
		return nil
	}
	b.log.Warn("lease/file: repairing lock file", "lease", name, "problem", v.problem, "holder", v.holder, "token", v.token)
	fr := fileRecord{Name: name, Token: v.token, Boot: b.bootID}
	if v.held() {
		fr.Holder, fr.PID, fr.ExpiresMonoNS, fr.TTLNS = v.holder, v.pid, v.expiresMono, v.ttl
	}
	return b.writeRecord(fr)
}

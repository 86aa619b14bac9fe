package file

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
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
	dir         string // canonical: symbolic links resolved
	dirOwner    uint32 // uid owning the directory at Open
	defaultName string
	log         *slog.Logger
	bootID      string
	netNS       uint64 // this process's network namespace

	closed chan struct{} // closed by Close
	wg     sync.WaitGroup

	mu       sync.Mutex
	isClosed bool
	tenures  map[tenureKey]*tenure
	notify   *notifier
}

// maxNameLen bounds lease names: a name is a file name, and the names of
// its record files must stay well within NAME_MAX.
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
	owner, err := checkDir(dir)
	if err != nil {
		return nil, err
	}
	// One directory, one name for it: the tenure sockets' names hash the
	// path, and every participant must hash the same one.
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	if info, err := os.Lstat(filepath.Join(dir, name)); err == nil && !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: lock file %s exists and is not a regular file (%v)", lease.ErrInvalid, path, info.Mode().Type())
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return nil, fmt.Errorf("lease/file: read boot id: %w", err)
	}
	netNS, err := netNamespace()
	if err != nil {
		return nil, fmt.Errorf("lease/file: network namespace: %w", err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Backend{
		dir:         dir,
		dirOwner:    owner,
		defaultName: name,
		log:         logger,
		bootID:      strings.TrimSpace(string(boot)),
		netNS:       netNS,
		closed:      make(chan struct{}),
		tenures:     map[tenureKey]*tenure{},
	}, nil
}

// checkDir checks that dir is a writable directory on a local filesystem,
// by creating and removing a probe file (permission bits do not stop root,
// a read-only mount does), and returns its owner.
func checkDir(dir string) (uint32, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return 0, fmt.Errorf("%w: directory %s: %v", lease.ErrInvalid, dir, errors.Unwrap(err))
	}
	if !info.IsDir() {
		return 0, fmt.Errorf("%w: %s is not a directory", lease.ErrInvalid, dir)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil {
		if fsName, bad := networkFS[int64(st.Type)]; bad {
			return 0, fmt.Errorf("%w: directory %s is on %s; the file backend needs a local filesystem (see the NFS caveat in lease/file's doc)", lease.ErrInvalid, dir, fsName)
		}
	}
	probe, err := os.CreateTemp(dir, ".coord-probe-*")
	if err != nil {
		return 0, fmt.Errorf("%w: directory %s is not writable: %v", lease.ErrInvalid, dir, errors.Unwrap(err))
	}
	probe.Close()
	if err := os.Remove(probe.Name()); err != nil {
		return 0, fmt.Errorf("lease/file: remove probe %s: %w", probe.Name(), err)
	}
	var dst unix.Stat_t
	if err := unix.Stat(dir, &dst); err != nil {
		return 0, fmt.Errorf("%w: directory %s: %v", lease.ErrInvalid, dir, err)
	}
	return dst.Uid, nil
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

func (b *Backend) lockPath(name string) string { return filepath.Join(b.dir, name) }
func (b *Backend) path(file string) string     { return filepath.Join(b.dir, file) }

// Acquire implements lease.Backend.
func (b *Backend) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (lease.Record, error) {
	if err := checkArgs(name, holder, ttl, 0, "acquire"); err != nil {
		return lease.Record{}, err
	}
	start := time.Now()
	for range maxRaces {
		if err := b.usable(ctx, name); err != nil {
			return lease.Record{}, err
		}
		rec, err := b.acquireOnce(name, holder, ttl, start)
		if !errors.Is(err, errRace) {
			return rec, err
		}
	}
	return lease.Record{}, fmt.Errorf("lease/file: acquire %q: %w: lost %d races in a row", name, lease.ErrUnavailable, maxRaces)
}

func (b *Backend) acquireOnce(name, holder string, ttl time.Duration, start time.Time) (lease.Record, error) {
	s, err := b.load(name)
	if err != nil {
		return lease.Record{}, err
	}
	defer s.close()
	v := b.assess(name, s, lease.MonotonicNow())
	if v.held() {
		return v.record(name), fmt.Errorf("lease/file: acquire %q: %w (by %q, token %d)", name, lease.ErrHeld, v.holder, v.token)
	}
	// Before taking over, ask the kernel for tenures the directory does not
	// explain: a live holder whose records were removed or whose directory
	// was replaced holds the lease until its expiry, which is written down
	// now (from its TTL) so that it does not move.
	known := v.token // the current record's token (0 if none)
	found := b.scan(name, known)
	if f, ok := unexplained(s, name, found); ok {
		if !b.orphaned(name, f) {
			return lease.Record{}, errRace
		}
		return b.quarantine(s, name, f)
	}
	token, err := b.nextToken(s, name, v, found)
	if err != nil {
		return lease.Record{}, err
	}
	if v.status != statusNever || len(s.damage) > 0 {
		b.log.Debug("lease/file: taking over", "lease", name, "was", v.describe(), "damage", s.damage)
	}
	sock := b.socketName(name, token, ttl, s.maxN+1)
	t, err := b.listen(sock, s.dirID)
	if err != nil {
		return lease.Record{}, err
	}
	rec := fileRecord{Name: name, Holder: holder, Token: token, PID: os.Getpid(), Boot: b.bootID,
		NetNS: b.netNS, Socket: sock, ExpiresMonoNS: lease.MonotonicNow() + int64(ttl), TTLNS: int64(ttl)}
	committed, err := b.commitChecked(s, rec)
	if err != nil {
		if committed {
			// The record is ours but the lock file cannot show it: hand
			// the lease back rather than hold it where people cannot see.
			b.releaseAfterFailure(name, holder, token)
		}
		t.end()
		return lease.Record{}, err
	}
	// The directory may have been moved or replaced between the read and
	// the commit: then the record went into a directory that nobody finds
	// at its path any more, while a process that opened the path since
	// may be taking the lease in the new one. Hand this tenure back and
	// try again at the path. (A move after this check is the holder's to
	// notice, through WatchTenure; any later acquirer at the path finds
	// this tenure's socket, listened before the commit, and waits.)
	if !b.dirStillAt(s.dirID) {
		t.end()
		b.log.Debug("lease/file: the directory moved during an acquisition; trying again", "lease", name, "dir", b.dir)
		return lease.Record{}, errRace
	}
	b.addTenure(name, token, t)
	return lease.Record{Name: name, Holder: holder, Token: token, Expiry: start.Add(ttl)}, nil
}

// dirStillAt reports whether the lock directory's path still names the
// directory id.
func (b *Backend) dirStillAt(id fileID) bool {
	var st unix.Stat_t
	if err := unix.Stat(b.dir, &st); err != nil {
		return false
	}
	return (fileID{uint64(st.Dev), st.Ino}) == id
}

// commitChecked commits rec after s and reports whether the record was
// committed, which it may have been even when the lock file then could not
// be replaced (an error wrapping ErrUnrepairable).
func (b *Backend) commitChecked(s *snapshot, rec fileRecord) (committed bool, err error) {
	err = b.commit(s, rec)
	var pe *publishError
	return err == nil || errors.As(err, &pe), err
}

// releaseAfterFailure frees a lease just acquired by this Backend when the
// acquisition cannot stand, best effort.
func (b *Backend) releaseAfterFailure(name, holder string, token uint64) {
	for range maxRaces {
		s, err := b.load(name)
		if err != nil {
			return
		}
		if !s.haveCur || s.cur.Token != token || s.cur.Holder != holder {
			s.close()
			return
		}
		free := s.cur
		free.Holder, free.PID, free.Socket, free.ExpiresMonoNS, free.TTLNS = "", 0, "", 0, 0
		err = b.commit(s, free)
		s.close()
		if !errors.Is(err, errRace) {
			return
		}
	}
}

// unexplained returns the live tenure with the highest token above every
// token the record knows, if any, that may hold the lease: not one whose
// acquisition was to commit a version that exists (intact) or existed
// already. That acquisition lost its race, or is still to find out that
// it did (a process stopped between listening and linking): had it
// committed, every later record would carry its token or a greater one.
// Its own record damaged is the exception: then it may hold the lease.
func unexplained(s *snapshot, name string, found []foundTenure) (foundTenure, bool) {
	var known uint64
	if s.haveCur {
		known = s.cur.Token
	}
	damaged := map[string]bool{}
	for _, d := range s.damage {
		file, _, _ := strings.Cut(d, ": ")
		damaged[file] = true
	}
	var best foundTenure
	for _, f := range found {
		if f.token <= known || f.token <= best.token {
			continue
		}
		if s.haveCur && f.version <= s.maxN && !damaged[versionFile(name, f.version)] {
			continue
		}
		best = f
	}
	return best, best.token != 0
}

// orphaned reports whether the tenure f, found without a record, stays so:
// an acquisition in flight listens on its socket a moment before it links
// its record, and must not be mistaken for a holder whose records were
// removed. It looks again a few times over orphanGrace; a record that
// explains f, or a socket that closed, means f was in flight.
func (b *Backend) orphaned(name string, f foundTenure) bool {
	for range 4 {
		time.Sleep(orphanGrace / 4) // a grace period for a commit in flight, not a wait for a state
		s, err := b.load(name)
		if err != nil {
			return false
		}
		explained := s.haveCur && s.cur.Token >= f.token
		s.close()
		if explained || b.liveness(name, fileRecord{Token: f.token, Socket: f.socket, NetNS: b.netNS}) != alive {
			return false
		}
	}
	return true
}

// orphanGrace is how long a tenure socket without a record must last to be
// taken for a holder whose records were removed. An acquisition links its
// record within microseconds of listening; one stopped in between (or
// starved of CPU for longer) is taken for such a holder, which costs at
// most its TTL.
const orphanGrace = 20 * time.Millisecond

// quarantine records a live tenure found without a record (see
// unexplained) as the holder, from now until its TTL has passed or its
// socket closes, and reports the lease held.
func (b *Backend) quarantine(s *snapshot, name string, f foundTenure) (lease.Record, error) {
	rec := fileRecord{Name: name, Holder: fmt.Sprintf("unknown (pid %d)", f.pid), Token: f.token, PID: int(f.pid),
		Boot: b.bootID, NetNS: b.netNS, Socket: f.socket, ExpiresMonoNS: lease.MonotonicNow() + int64(f.ttl), TTLNS: int64(f.ttl)}
	if _, err := b.commitChecked(s, rec); err != nil {
		return lease.Record{}, err
	}
	b.log.Warn("lease/file: a live holder has no record (records removed, or the directory replaced); it keeps the lease until its TTL passes or it ends",
		"lease", name, "token", f.token, "pid", f.pid, "ttl", f.ttl)
	held := lease.Record{Name: name, Holder: rec.Holder, Token: f.token, Expiry: time.Now().Add(f.ttl)}
	return held, fmt.Errorf("lease/file: acquire %q: %w (by a holder with no record, pid %d, token %d)", name, lease.ErrHeld, f.pid, f.token)
}

// nextToken returns the token of a new tenure: one above every token known
// (the record's, live tenure sockets', and the durable reservation's when
// the record may have lost writes), and at least the wall clock in
// microseconds. The floor keeps tokens growing when every record is gone
// (removed, a directory replaced, a reboot with the directory on tmpfs);
// a token above the clock (the clock was set back) is reserved durably
// before it is used. See the package doc for what the floor assumes.
func (b *Backend) nextToken(s *snapshot, name string, v view, found []foundTenure) (uint64, error) {
	last := v.token
	for _, f := range found {
		last = max(last, f.token)
	}
	if !s.haveCur || len(s.damage) > 0 || s.cur.Boot != b.bootID {
		// The record may have lost writes (a machine crash; it is not
		// fsynced) or be gone: the reservation has not.
		r, err := b.reserved(s, name)
		if err != nil {
			return 0, err
		}
		last = max(last, r.Reserved)
	}
	if last >= math.MaxUint64/2 {
		return 0, fmt.Errorf("lease/file: %q: %w: last token %d leaves no room to grow: remove the record files by hand", name, lease.ErrUnrepairable, last)
	}
	floor := uint64(time.Now().UnixMicro())
	token := max(last+1, floor)
	if token > floor {
		if err := b.reserve(s, name, token); err != nil {
			return 0, err
		}
	}
	return token, nil
}

// Renew implements lease.Backend.
func (b *Backend) Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (lease.Record, error) {
	if err := checkArgs(name, holder, ttl, token, "renew"); err != nil {
		return lease.Record{}, err
	}
	start := time.Now()
	for range maxRaces {
		if err := b.usable(ctx, name); err != nil {
			return lease.Record{}, err
		}
		rec, err := b.renewOnce(name, holder, token, ttl, start)
		if !errors.Is(err, errRace) {
			return rec, err
		}
	}
	return lease.Record{}, fmt.Errorf("lease/file: renew %q: %w: lost %d races in a row", name, lease.ErrUnavailable, maxRaces)
}

func (b *Backend) renewOnce(name, holder string, token uint64, ttl time.Duration, start time.Time) (lease.Record, error) {
	s, err := b.load(name)
	if err != nil {
		return lease.Record{}, err
	}
	defer s.close()
	v := b.assess(name, s, lease.MonotonicNow())
	if why := b.notCurrent(name, s, v, holder, token, false); why != "" {
		return v.record(name), fmt.Errorf("lease/file: renew %q token %d: %w (%s)", name, token, lease.ErrLost, why)
	}
	rec := s.cur
	rec.ExpiresMonoNS, rec.TTLNS = lease.MonotonicNow()+int64(ttl), int64(ttl)
	if err := b.commit(s, rec); err != nil {
		return lease.Record{}, err
	}
	return lease.Record{Name: name, Holder: holder, Token: token, Expiry: start.Add(ttl)}, nil
}

// notCurrent says why the tenure of token (held by holder) is not the
// current, held one, ending this Backend's tenure of token if so, or
// returns "". A stale holder changes nothing: it neither overwrites nor
// deletes the new holder's record.
func (b *Backend) notCurrent(name string, s *snapshot, v view, holder string, token uint64, releasing bool) string {
	why := ""
	t := b.tenureOf(name, token)
	switch {
	case t != nil && t.dirID != s.dirID:
		why = "the lock directory " + b.dir + " was replaced"
	case releasing && v.token == token && v.holder == holder && v.status != statusReleased && v.status != statusNever:
		return "" // a release frees even an expired lease it still names
	case !v.held():
		why = v.describe()
	case v.token != token || v.holder != holder:
		why = v.describe()
	default:
		return ""
	}
	// The tenure of token is over. Its socket closes now if a newer tenure
	// holds the lease (nobody waits on it), or on Release; otherwise (the
	// directory replaced, the record removed) others wait on it, and it
	// closes when the holder, having reported its loss, hands the lease
	// back, so that its report comes first in a merged timeline. A caller
	// that is not the holder never closes the holder's socket.
	dirReplaced := t != nil && t.dirID != s.dirID
	bogus := v.token == token && v.holder != holder && v.holder != "" && !dirReplaced && !strings.HasPrefix(v.holder, "unknown (pid ")
	if !bogus && (releasing || v.token > token || v.token == token && v.holder == holder) {
		b.endTenure(name, token)
	}
	return why
}

// Release implements lease.Backend.
func (b *Backend) Release(ctx context.Context, name, holder string, token uint64) error {
	if err := checkArgs(name, holder, 0, token, "release"); err != nil {
		return err
	}
	for range maxRaces {
		if err := b.usable(ctx, name); err != nil {
			return err
		}
		err := b.releaseOnce(name, holder, token)
		if !errors.Is(err, errRace) {
			return err
		}
	}
	return fmt.Errorf("lease/file: release %q: %w: lost %d races in a row", name, lease.ErrUnavailable, maxRaces)
}

func (b *Backend) releaseOnce(name, holder string, token uint64) error {
	s, err := b.load(name)
	if err != nil {
		return err
	}
	defer s.close()
	v := b.assess(name, s, lease.MonotonicNow())
	if why := b.notCurrent(name, s, v, holder, token, true); why != "" {
		return fmt.Errorf("lease/file: release %q token %d: %w (%s)", name, token, lease.ErrLost, why)
	}
	// Commit the free record before closing the tenure socket, so that a
	// watcher woken by the socket reads "released", not "dead".
	free := s.cur
	free.Holder, free.PID, free.Socket, free.ExpiresMonoNS, free.TTLNS = "", 0, "", 0, 0
	err = b.commit(s, free)
	if errors.Is(err, errRace) {
		return err
	}
	b.endTenure(name, token)
	return err
}

// usable checks, before each attempt of an operation, that the Backend is
// open and the caller still waits.
func (b *Backend) usable(ctx context.Context, name string) error {
	if b.isClosedNow() {
		return fmt.Errorf("lease/file: %q: %w", name, lease.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lease/file: %q: %w: %v", name, lease.ErrUnavailable, err)
	}
	return nil
}

// Get implements lease.Backend. It reads, and never writes.
func (b *Backend) Get(ctx context.Context, name string) (lease.Record, error) {
	v, err := b.view(ctx, name)
	if err != nil {
		return lease.Record{}, err
	}
	return v.record(name), nil
}

// view returns the assessed state of name.
func (b *Backend) view(ctx context.Context, name string) (view, error) {
	if err := checkName(name); err != nil {
		return view{}, err
	}
	if err := b.usable(ctx, name); err != nil {
		return view{}, err
	}
	s, err := b.load(name)
	if err != nil {
		return view{}, err
	}
	defer s.close()
	return b.assess(name, s, lease.MonotonicNow()), nil
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
	return nil
}

func (b *Backend) isClosedNow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.isClosed
}

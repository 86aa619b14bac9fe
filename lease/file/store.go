//go:build linux

package file

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"coord/lease"

	"golang.org/x/sys/unix"
)

// fileID identifies a file (here: the lock directory) by device and inode,
// which a rename does not change and a new directory at the same path does.
type fileID struct{ dev, ino uint64 }

// snapshot is what one operation read of a lease name: the directory as it
// opened it, and the current record. Every file of the operation is reached
// through dir, so that a directory swapped in at the same path meanwhile
// does not mix two directories' files in one decision.
type snapshot struct {
	dir     *os.File
	dirID   fileID
	maxN    uint64     // highest version number among the record files, valid or not
	cur     fileRecord // the valid record with the highest version
	haveCur bool
	damage  []string // record files numbered above cur that are not records, and why
	entries []string // the directory's names, for removing old versions
}

func (s *snapshot) close() { s.dir.Close() }

// errRace means another process changed the record between this
// operation's read and its write: read again and decide again.
var errRace = errors.New("lease/file: record changed concurrently")

// maxRaces bounds how often one operation reads again after losing a race.
const maxRaces = 16

// load reads the current record of name: the valid record file with the
// highest version. A record file removed between the listing and the read
// (an old version, removed by another process) means the listing is stale:
// list again.
func (b *Backend) load(name string) (*snapshot, error) {
	for range maxRaces {
		s, err := b.loadOnce(name)
		if !errors.Is(err, errRace) {
			return s, err
		}
	}
	return nil, fmt.Errorf("lease/file: read %q: %w: record files keep changing", name, lease.ErrUnavailable)
}

func (b *Backend) loadOnce(name string) (*snapshot, error) {
	// Plain system calls: os.Open would also try to register the
	// directory with the network poller, four calls on every operation.
	dfd, err := unix.Open(b.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, b.fsError("open directory", b.dir, err)
	}
	dir := os.NewFile(uintptr(dfd), b.dir)
	s := &snapshot{dir: dir}
	var st unix.Stat_t
	if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
		dir.Close()
		return nil, b.fsError("stat directory", b.dir, err)
	}
	s.dirID = fileID{uint64(st.Dev), st.Ino}
	s.entries, err = dir.Readdirnames(-1)
	if err != nil {
		dir.Close()
		return nil, b.fsError("list directory", b.dir, err)
	}
	var versions []uint64
	for _, e := range s.entries {
		if n, ok := parseVersionFile(name, e); ok {
			versions = append(versions, n)
		}
	}
	slices.Sort(versions)
	if len(versions) > 0 {
		s.maxN = versions[len(versions)-1]
	}
	for i := len(versions) - 1; i >= 0; i-- {
		n := versions[i]
		r, err := b.readRecord(s, name, n)
		switch {
		case err == nil:
			s.cur, s.haveCur = r, true
			return s, nil
		case errors.Is(err, fs.ErrNotExist):
			dir.Close()
			return nil, errRace
		case errors.Is(err, errFormat):
			s.damage = append(s.damage, versionFile(name, n)+": "+err.Error())
		default:
			dir.Close()
			return nil, err
		}
	}
	return s, nil
}

// readRecord reads and decodes the record file of version n.
func (b *Backend) readRecord(s *snapshot, name string, n uint64) (fileRecord, error) {
	file := versionFile(name, n)
	data, err := readSmall(int(s.dir.Fd()), file)
	switch {
	case errors.Is(err, unix.ENOENT):
		return fileRecord{}, fs.ErrNotExist
	case errors.Is(err, unix.ELOOP):
		return fileRecord{}, fmt.Errorf("%w: a symbolic link", errFormat)
	case errors.Is(err, errTooLong):
		return fileRecord{}, fmt.Errorf("%w: longer than %d bytes", errFormat, maxRecordSize)
	case err != nil:
		return fileRecord{}, b.fsError("read record", b.path(file), err)
	}
	return decodeRecord(name, n, data)
}

var errTooLong = errors.New("lease/file: file too long")

// readSmall reads the file named file in the directory open at dirFD, up to
// maxRecordSize bytes (errTooLong beyond), with plain system calls: these
// reads are on every operation's path, and an *os.File costs a few more.
// O_NONBLOCK keeps a FIFO put in a record file's place from blocking the
// open; a symbolic link is refused (ELOOP).
func readSmall(dirFD int, file string) ([]byte, error) {
	fd, err := unix.Openat(dirFD, file, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, maxRecordSize+1)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	if n > maxRecordSize {
		return nil, errTooLong
	}
	return buf[:n], nil
}

// writeNew writes data to the open file fd and makes it readable by every
// participant (not the umask's choice).
func writeNew(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return unix.Fchmod(fd, 0o644)
}

// newID returns a random identifier for a record version.
func newID() string {
	var b [12]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// commit writes rec as the next version after s: the compare-and-swap. The
// record is written to an unnamed file that then gets its version's name
// with link(2), which fails if the name exists: of any number of processes
// that read the same snapshot, exactly one links the next version, and the
// others get errRace. A process stopped between its read and its link
// (SIGSTOP, a swap storm) holds nothing that blocks anyone; when it wakes,
// confirm finds its link stale (its predecessor gone, or a newer version
// not built on it) and takes it back.
//
// After the commit, versions older than keepVersions below it and damaged
// record files below it are removed, and the lock file is rewritten as a
// copy of rec. A lock file this process may not replace is an error
// wrapping lease.ErrUnrepairable, returned after the commit: callers decide
// what the commit means then.
func (b *Backend) commit(s *snapshot, rec fileRecord) error {
	rec.Version = s.maxN + 1
	if rec.Version >= maxVersion {
		return fmt.Errorf("lease/file: %q: %w: record version %d is beyond %d: remove the record files by hand", rec.Name, lease.ErrUnrepairable, s.maxN, uint64(maxVersion))
	}
	rec.ID = newID()
	if s.haveCur {
		rec.Prev = s.cur.ID
	}
	rec.Written = time.Now().UTC()
	data := encodeLine(recordMagic, rec)
	file := versionFile(rec.Name, rec.Version)
	testHook("before-commit")
	if err := b.linkNew(s, file, data); err != nil {
		return err
	}
	if err := b.confirm(s, rec); err != nil {
		unix.Unlinkat(int(s.dir.Fd()), file, 0)
		return err
	}
	b.removeOld(s, rec.Name, rec.Version)
	return b.publish(s, rec.Name, data)
}

// linkNew creates the file named file in s's directory with data, only if
// no file has that name (errRace if one has). The data is written to an
// unnamed file (O_TMPFILE) that is then linked into place, so no partial
// record is ever visible and a writer that dies leaves nothing behind;
// where O_TMPFILE is not supported, to a named temporary file, linked and
// then removed.
func (b *Backend) linkNew(s *snapshot, file string, data []byte) error {
	dfd := int(s.dir.Fd())
	fd, err := unix.Openat(dfd, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
			return b.linkNewNamed(s, file, data)
		}
		return b.fsError("create record", b.path(file), err)
	}
	defer unix.Close(fd)
	if err := writeNew(fd, data); err != nil {
		return b.fsError("write record", b.path(file), err)
	}
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dfd, file, unix.AT_SYMLINK_FOLLOW)
	if errors.Is(err, unix.EEXIST) {
		return errRace
	}
	if err != nil {
		return b.fsError("link record", b.path(file), err)
	}
	return nil
}

func (b *Backend) linkNewNamed(s *snapshot, file string, data []byte) error {
	dfd := int(s.dir.Fd())
	tmp := file + ".tmp-" + strconv.FormatUint(uint64(time.Now().UnixNano()), 10)
	fd, err := unix.Openat(dfd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return b.fsError("create record", b.path(tmp), err)
	}
	werr := writeNew(fd, data)
	unix.Close(fd)
	defer unix.Unlinkat(dfd, tmp, 0)
	if werr != nil {
		return b.fsError("write record", b.path(tmp), werr)
	}
	err = unix.Linkat(dfd, tmp, dfd, file, 0)
	if errors.Is(err, unix.EEXIST) {
		return errRace
	}
	if err != nil {
		return b.fsError("link record", b.path(file), err)
	}
	return nil
}

// confirm checks that the version rec just linked is a real successor of
// the snapshot it was decided on, not the resurrection of a version
// number removed while this process was stopped between its read and its
// link: its predecessor must still be there, unchanged, and any newer
// version must have been built on it. Otherwise it returns errRace.
//
// Why this suffices: versions are removed oldest first and only
// keepVersions below a newer one, so if rec's number had been taken and
// removed before, its predecessor (a lower number) was removed too; and a
// version numbered above rec that does not name rec as its predecessor was
// linked before rec existed, from a snapshot rec's decision never saw.
//
// With a predecessor, its check alone suffices (and saves listing the
// directory on every renewal): no version above rec can have been linked
// before rec unless rec's number had been taken and removed before.
func (b *Backend) confirm(s *snapshot, rec fileRecord) error {
	if s.haveCur {
		prev, err := b.readRecord(s, rec.Name, s.cur.Version)
		if err != nil || prev.ID != s.cur.ID {
			return errRace
		}
		return nil
	}
	names, err := readDirAgain(s.dir)
	if err != nil {
		return b.fsError("list directory", b.dir, err)
	}
	next := uint64(0)
	for _, e := range names {
		if n, ok := parseVersionFile(rec.Name, e); ok && n > rec.Version && (next == 0 || n < next) {
			next = n
		}
	}
	if next == 0 {
		return nil
	}
	if r, err := b.readRecord(s, rec.Name, next); err == nil && r.Prev == rec.ID {
		return nil // committed, and already succeeded by another version
	}
	return errRace
}

// readDirAgain lists the directory open at dir afresh, through a new
// descriptor of the same directory (not of whatever is at its path now).
func readDirAgain(dir *os.File) ([]string, error) {
	fd, err := unix.Openat(int(dir.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	again := os.NewFile(uintptr(fd), dir.Name())
	defer again.Close()
	return again.Readdirnames(-1)
}

// removeOld removes, oldest first, the record files of name more than
// keepVersions below version n, the damaged ones below n, and temporary
// files of writers that died (named ones, where O_TMPFILE is missing),
// older than a minute. Failures are left for the next commit.
func (b *Backend) removeOld(s *snapshot, name string, n uint64) {
	dfd := int(s.dir.Fd())
	var old []uint64
	for _, e := range s.entries {
		if v, ok := parseVersionFile(name, e); ok && v < n {
			old = append(old, v)
		}
		if i := strings.LastIndex(e, ".tmp-"); i > 0 && strings.HasPrefix(e, "."+name+".") && allDigits(e[i+5:]) {
			var st unix.Stat_t
			if unix.Fstatat(dfd, e, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && time.Since(time.Unix(st.Mtim.Unix())) > time.Minute {
				unix.Unlinkat(dfd, e, 0)
			}
		}
	}
	slices.Sort(old)
	damaged := map[string]bool{}
	for _, d := range s.damage {
		file, _, _ := strings.Cut(d, ": ")
		damaged[file] = true
	}
	for _, v := range old {
		file := versionFile(name, v)
		if v+keepVersions < n {
			unix.Unlinkat(dfd, file, 0)
		} else if damaged[file] {
			b.log.Warn("lease/file: removing a damaged record file", "lease", name, "path", b.path(file))
			unix.Unlinkat(dfd, file, 0)
		}
	}
}

// publish replaces the lock file with a copy of the record, atomically:
// a temporary file exchanged with the lock file (renameat2
// RENAME_EXCHANGE), or renamed over it where there is nothing to exchange
// with or the file system cannot exchange. Nobody decides anything from
// the lock file; it is there for people and their tools, and may lag by
// one operation when two commit at once. A lock file this process may not
// replace is an error wrapping lease.ErrUnrepairable; other failures are
// logged.
//
// Why exchange: ext4 treats a rename that replaces a file as an
// application's replace-via-rename and writes the new file's data back
// first (auto_da_alloc), which cost 0.3 ms at the median and several ms
// under load on every record, against 15 us for an exchange and an unlink.
func (b *Backend) publish(s *snapshot, name string, data []byte) error {
	dfd := int(s.dir.Fd())
	tmp := "." + name + ".tmp-" + strconv.FormatUint(uint64(time.Now().UnixNano()), 10)
	fd, err := unix.Openat(dfd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		b.log.Warn("lease/file: cannot write the lock file's copy", "lease", name, "err", err)
		return nil
	}
	werr := writeNew(fd, data)
	unix.Close(fd)
	defer unix.Unlinkat(dfd, tmp, 0) // the old copy after an exchange; nothing after a rename
	if werr != nil {
		b.log.Warn("lease/file: cannot write the lock file's copy", "lease", name, "err", werr)
		return nil
	}
	err = unix.Renameat2(dfd, tmp, dfd, name, unix.RENAME_EXCHANGE)
	if err == nil {
		b.checkReplaced(s, name, tmp)
		return nil
	}
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	switch {
	case err == nil:
		return nil
	case isPermanent(err):
		return &publishError{fmt.Errorf("lease/file: %w: lock file %s cannot be replaced: %v%s", lease.ErrUnrepairable, b.lockPath(name), err, b.explain(s, name))}
	default:
		b.log.Warn("lease/file: cannot replace the lock file", "lease", name, "path", b.lockPath(name), "err", err)
		return nil
	}
}

// checkReplaced reads the lock file's previous content, which the exchange
// left at tmp, and logs a repair if it was not a record (empty after a
// touch, truncated, garbage): people reading the lock file should learn
// that it had been damaged, and by whom it was put right.
func (b *Backend) checkReplaced(s *snapshot, name, tmp string) {
	old, err := readSmall(int(s.dir.Fd()), tmp)
	if err != nil && !errors.Is(err, errTooLong) {
		return
	}
	var r fileRecord
	if err := decodeLine(recordMagic, old, &r); err != nil {
		b.log.Warn("lease/file: repairing lock file", "lease", name, "problem", "lock file unreadable: "+err.Error())
	}
}

// publishError is a lock file that could not be replaced after a commit:
// the record is committed, the lock file does not show it.
type publishError struct{ err error }

func (e *publishError) Error() string { return e.err.Error() }
func (e *publishError) Unwrap() error { return e.err }

// explain says why the lock file may not be replaced, as far as it can
// tell: its owner and mode, a sticky directory, an immutable flag.
func (b *Backend) explain(s *snapshot, name string) string {
	var st unix.Stat_t
	if unix.Fstatat(int(s.dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return ""
	}
	why := fmt.Sprintf(" (owner uid %d, mode %04o", st.Uid, st.Mode&0o7777)
	var dst unix.Stat_t
	if unix.Fstat(int(s.dir.Fd()), &dst) == nil && dst.Mode&unix.S_ISVTX != 0 && st.Uid != uint32(os.Geteuid()) && dst.Uid != uint32(os.Geteuid()) {
		why += fmt.Sprintf("; the directory is sticky (mode %04o) and the file belongs to another user", dst.Mode&0o7777)
	}
	if fd, err := unix.Openat(int(s.dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
		flags, err := unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS)
		unix.Close(fd)
		if err == nil && flags&(fsImmutableFL|fsAppendFL) != 0 {
			why += "; the file is immutable or append-only (chattr +i / +a)"
		}
	}
	return why + "): fix or remove it by hand"
}

// Inode flags (linux/fs.h) that forbid replacing a file.
const (
	fsImmutableFL = 0x10
	fsAppendFL    = 0x20
)

// isPermanent reports whether a file system error will not go away by
// waiting: permissions, a read-only file system.
func isPermanent(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, unix.EROFS)
}

// fsError wraps a file system error: lease.ErrUnrepairable for one that
// waiting will not mend, lease.ErrUnavailable otherwise.
func (b *Backend) fsError(what, path string, err error) error {
	if isPermanent(err) {
		return fmt.Errorf("lease/file: %w: %s %s: %v", lease.ErrUnrepairable, what, path, err)
	}
	return fmt.Errorf("lease/file: %s %s: %w: %v", what, path, lease.ErrUnavailable, err)
}

// reserved returns the token reservation of name (0 if none).
func (b *Backend) reserved(s *snapshot, name string) (reserveSlot, error) {
	buf := make([]byte, 2*slotSize)
	fd, err := unix.Openat(int(s.dir.Fd()), reserveFile(name), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return reserveSlot{}, nil
	}
	if err != nil {
		return reserveSlot{}, b.fsError("open reservation", b.path(reserveFile(name)), err)
	}
	f := os.NewFile(uintptr(fd), reserveFile(name))
	defer f.Close()
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return reserveSlot{}, b.fsError("read reservation", b.path(reserveFile(name)), err)
	}
	r, _ := decodeSlots(buf[:n], reserveMagic, func(s reserveSlot) uint64 { return s.Seq })
	return r, nil
}

// reserve makes every token up to token durable before it is used: it
// writes a reservation reaching reserveAheadUS beyond token, fsyncs it, and
// reads it back (two processes reserving at once may write the same slot;
// the check makes sure the survivor covers token).
func (b *Backend) reserve(s *snapshot, name string, token uint64) error {
	path := b.path(reserveFile(name))
	fd, err := unix.Openat(int(s.dir.Fd()), reserveFile(name), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return b.fsError("open reservation", path, err)
	}
	f := os.NewFile(uintptr(fd), reserveFile(name))
	defer f.Close()
	for range 4 {
		cur, err := b.reserved(s, name)
		if err != nil {
			return err
		}
		if cur.Reserved >= token {
			return nil
		}
		r := reserveSlot{Seq: cur.Seq + 1, Reserved: max(cur.Reserved, token+reserveAheadUS)}
		if _, err := f.WriteAt(encodeSlot(reserveMagic, r), int64(r.Seq%2)*slotSize); err != nil {
			return b.fsError("write reservation", path, err)
		}
		if err := f.Sync(); err != nil {
			return b.fsError("sync reservation", path, err)
		}
	}
	return fmt.Errorf("lease/file: reserve tokens of %q: %w: concurrent reservations keep overwriting each other", name, lease.ErrUnavailable)
}

func reserveFile(name string) string { return "." + name + ".reserve" }

func allDigits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

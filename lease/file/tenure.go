//go:build linux

package file

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"coord/lease"
	"coord/lease/eventlog"

	"golang.org/x/sys/unix"
)

// Status of a lease name as assessed from its record.
const (
	statusNever    = "never taken"
	statusReleased = "released"
	statusDead     = "holder dead"
	statusExpired  = "expired"
	statusHeld     = "held"
)

// view is the assessed state of a lease name: who holds it, if anyone.
type view struct {
	status      string
	token       uint64 // current token, or the last one issued
	holder      string // the holder, or (not held) the last one
	pid         int
	expiresMono int64 // CLOCK_MONOTONIC expiry when held
	socket      string
	observable  bool // the holder's death can be seen (its tenure socket)
}

func (v view) held() bool { return v.status == statusHeld }

// record converts the view to a lease.Record, its expiry on this process's
// clock.
func (v view) record(name string) lease.Record {
	if !v.held() {
		return lease.Record{Name: name, Token: v.token}
	}
	left := time.Duration(v.expiresMono - eventlog.MonotonicNow())
	return lease.Record{Name: name, Holder: v.holder, Token: v.token, Expiry: time.Now().Add(left)}
}

// describe says who holds the lease, for error messages.
func (v view) describe() string {
	if v.held() {
		return fmt.Sprintf("held by %q under token %d", v.holder, v.token)
	}
	return fmt.Sprintf("%s; last token %d", v.status, v.token)
}

// assess decides who holds the lease from the current record and the
// kernel's word on its holder. The record's holder holds the lease unless
// it released it, the record belongs to an earlier boot, its expiry has
// passed, or the kernel says its tenure socket has no listener: the only
// death evidence taken, because only the end of the tenure (the death of
// its process, however it died, or its release) produces it. Anything else
// (a socket in another network namespace, a timeout, a full backlog) leaves
// the holder alive until its expiry.
func (b *Backend) assess(name string, s *snapshot, nowMono int64) view {
	if !s.haveCur {
		return view{status: statusNever}
	}
	r := s.cur
	v := view{token: r.Token, holder: r.Holder, pid: r.PID, socket: r.Socket}
	switch {
	case r.Holder == "":
		v.status = statusReleased
	case r.Boot != b.bootID:
		v.status = statusExpired
	default:
		l := b.liveness(name, r)
		v.observable = l != unknown
		switch {
		case l == dead:
			v.status = statusDead
		case nowMono >= r.ExpiresMonoNS:
			v.status = statusExpired
		default:
			v.status, v.expiresMono = statusHeld, r.ExpiresMonoNS
		}
	}
	return v
}

// liveness is what the kernel says of a tenure.
type liveness int

const (
	unknown liveness = iota // no evidence either way: the expiry decides
	alive                   // its socket accepts connections
	dead                    // its socket has no listener
)

// liveness connects to r's tenure socket. The socket is in the abstract
// namespace: there is no file anyone could delete, and the name is unbound
// only when the socket closes, so a refused connection is evidence that
// the tenure ended. Abstract names are per network namespace: a holder in
// another one is invisible here, so its tenure is unknown, never dead.
func (b *Backend) liveness(name string, r fileRecord) liveness {
	if b.hasTenure(name, r.Token) {
		return alive
	}
	if r.Socket == "" || r.NetNS != b.netNS || !strings.HasPrefix(r.Socket, b.socketPrefix(name)) {
		return unknown
	}
	c, err := net.DialTimeout("unix", "@"+r.Socket, 200*time.Millisecond)
	switch {
	case err == nil:
		c.Close()
		return alive
	case errors.Is(err, syscall.ECONNREFUSED):
		return dead
	default:
		return unknown
	}
}

// socketPrefix is the start of the abstract names of name's tenure
// sockets: a hash of the lock file's path, so that a directory put in
// place of another at the same path (mv dir dir.old; mkdir dir) meets the
// live tenures of the one it replaced.
func (b *Backend) socketPrefix(name string) string {
	sum := sha256.Sum256([]byte(b.lockPath(name)))
	return "coord-lease/v2/" + hex.EncodeToString(sum[:12]) + "/"
}

// socketName is the abstract name of the tenure socket of token, acquired
// for ttl by committing record version: "coord-lease/v2/<path hash>/<token>/
// <ttl ns>/<version>", 100 bytes at most (an address holds 107).
func (b *Backend) socketName(name string, token uint64, ttl time.Duration, version uint64) string {
	return b.socketPrefix(name) + strconv.FormatUint(token, 10) + "/" + strconv.FormatInt(int64(ttl), 10) + "/" + strconv.FormatUint(version, 10)
}

// tenureKey identifies one tenure of this Backend.
type tenureKey struct {
	name  string
	token uint64
}

// tenure is a holder's liveness handle: a unix socket that listens for as
// long as the tenure lasts in this process. The kernel closes it when the
// process dies, however it dies; everyone connected then reads EOF at once,
// and new connections are refused.
type tenure struct {
	ln    *net.UnixListener
	dirID fileID        // the directory the tenure was recorded in
	ended chan struct{} // closed by end

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// listen opens the tenure socket named sock. A name already bound means
// another process is acquiring the same token right now: errRace.
func (b *Backend) listen(sock string, dirID fileID) (*tenure, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: "@" + sock, Net: "unix"})
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, errRace
	}
	if err != nil {
		return nil, fmt.Errorf("lease/file: listen on tenure socket: %w: %v", lease.ErrUnavailable, err)
	}
	t := &tenure{ln: ln, dirID: dirID, ended: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		t.serve()
	}()
	return t, nil
}

// serve accepts watchers' connections and holds them open until the tenure
// ends; it reads nothing but EOF.
func (t *tenure) serve() {
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			c.Close()
			return
		}
		t.conns[c] = struct{}{}
		t.mu.Unlock()
		go func() {
			io.Copy(io.Discard, c)
			t.mu.Lock()
			delete(t.conns, c)
			t.mu.Unlock()
			c.Close()
		}()
	}
}

// end closes the tenure socket and every connection to it, so that
// watchers wake at once.
func (t *tenure) end() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	conns := t.conns
	t.conns = nil
	t.mu.Unlock()
	t.ln.Close()
	for c := range conns {
		c.Close()
	}
	close(t.ended)
}

func (b *Backend) addTenure(name string, token uint64, t *tenure) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.isClosed {
		t.end()
		return
	}
	b.tenures[tenureKey{name, token}] = t
}

// tenureOf returns this Backend's tenure of token, or nil.
func (b *Backend) tenureOf(name string, token uint64) *tenure {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tenures[tenureKey{name, token}]
}

func (b *Backend) hasTenure(name string, token uint64) bool { return b.tenureOf(name, token) != nil }

// endTenure ends this Backend's tenure of token, if it has it.
func (b *Backend) endTenure(name string, token uint64) {
	b.mu.Lock()
	t := b.tenures[tenureKey{name, token}]
	delete(b.tenures, tenureKey{name, token})
	b.mu.Unlock()
	if t != nil {
		t.end()
	}
}

// foundTenure is a live tenure socket of a lease name found by scan.
type foundTenure struct {
	token   uint64
	ttl     time.Duration
	version uint64 // the record version its acquisition was to commit
	socket  string
	pid     int32
}

// scan lists the live tenure sockets of name in this network namespace
// with a token above known, from the kernel's table of unix sockets
// (/proc/net/unix), whatever the directory says: a holder whose records
// were removed, or whose directory was replaced, is found here. Only
// sockets whose owner could be a participant count (root, this process's
// user, the directory's owner), so that another user cannot stall the
// lease or inflate its tokens by binding such names; they are logged.
// Sockets at or below known are tenures the record explains, and are not
// connected to: a takeover usually finds none above it, and pays only for
// reading the table.
func (b *Backend) scan(name string, known uint64) []foundTenure {
	data, err := readProcFile("/proc/net/unix")
	if err != nil {
		b.log.Warn("lease/file: cannot list unix sockets; tenures without records are not seen", "err", err)
		return nil
	}
	prefix := "@" + b.socketPrefix(name)
	var found []foundTenure
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) < 8 || !strings.HasPrefix(fields[7], prefix) {
			continue
		}
		if flags, err := strconv.ParseUint(fields[3], 16, 32); err != nil || flags&soAcceptCon == 0 {
			continue // not a listener (an accepted connection shares its name)
		}
		parts := strings.Split(fields[7][len(prefix):], "/")
		if len(parts) != 3 {
			continue
		}
		token, err1 := strconv.ParseUint(parts[0], 10, 64)
		ttl, err2 := strconv.ParseInt(parts[1], 10, 64)
		version, err3 := strconv.ParseUint(parts[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || token == 0 || token >= math.MaxUint64/2 || ttl <= 0 || version == 0 {
			continue
		}
		f := foundTenure{token: token, ttl: time.Duration(ttl), version: version, socket: fields[7][1:]}
		if token > known && b.trusted(&f) {
			found = append(found, f)
		}
	}
	return found
}

// trusted connects to a found socket and checks who listens on it
// (SO_PEERCRED), filling in its pid.
func (b *Backend) trusted(f *foundTenure) bool {
	c, err := net.DialTimeout("unix", "@"+f.socket, 200*time.Millisecond)
	if err != nil {
		return false // gone since the scan, or not answering: no evidence
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if cerr != nil {
		return false
	}
	if cred.Uid != 0 && cred.Uid != uint32(os.Geteuid()) && cred.Uid != b.dirOwner {
		b.log.Warn("lease/file: ignoring a tenure socket owned by a user who is not a participant", "socket", f.socket, "uid", cred.Uid, "pid", cred.Pid)
		return false
	}
	f.pid = cred.Pid
	return true
}

// readProcFile reads a file of /proc with plain system calls (os.ReadFile
// registers it with the network poller first).
func readProcFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 16<<10)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// soAcceptCon is the flag /proc/net/unix shows on listening sockets
// (__SO_ACCEPTCON in the kernel).
const soAcceptCon = 1 << 16

// netNamespace returns the inode of this process's network namespace, which
// identifies it.
func netNamespace() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

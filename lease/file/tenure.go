package file

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"coord/lease"
)

// Status of a lease name as assessed from its files.
const (
	statusNever    = "never taken"
	statusReleased = "released"
	statusDead     = "holder dead"
	statusExpired  = "expired"
	statusHeld     = "held"
)

// view is the assessed state of a lease name: who holds it, if anyone, and
// what (if anything) is wrong with the lock file.
type view struct {
	status      string
	token       uint64 // current token, or the last one issued
	holder      string // "" unless held (or, for describe, the last holder)
	pid         int
	expiresMono int64 // CLOCK_MONOTONIC expiry when held
	ttl         int64
	problem     string // non-empty: the lock file should be rewritten, and why
}

func (v view) held() bool { return v.status == statusHeld }

// record converts the view to a lease.Record, its expiry on this process's
// clock.
func (v view) record(name string) lease.Record {
	if !v.held() {
		return lease.Record{Name: name, Token: v.token}
	}
	left := time.Duration(v.expiresMono - lease.MonotonicNow())
	return lease.Record{Name: name, Holder: v.holder, Token: v.token, Expiry: time.Now().Add(left)}
}

// describe says who holds the lease, for error messages.
func (v view) describe() string {
	if v.held() {
		return fmt.Sprintf("held by %q under token %d", v.holder, v.token)
	}
	return fmt.Sprintf("%s; last token %d", v.status, v.token)
}

// assess decides who holds the lease from the guard slot (the tenure with
// the highest token), the lock file (its expiry, or that it was released),
// and the tenure socket (whether its process is alive).
//
// The current tenure is the one with the highest token known. It holds the
// lease unless it was released, belongs to an earlier boot, its process is
// dead, or its expiry has passed. A lock file that cannot be read, or that
// lags behind the guard, gives no expiry: a live holder is then granted its
// TTL again from now (later than the truth, never earlier, so never a
// second holder) and the lock file is rewritten.
func (b *Backend) assess(name string, st state, nowMono int64) view {
	v := view{token: st.slot.Token, holder: st.slot.Holder, pid: st.slot.PID, ttl: st.slot.TTLNS}
	recOK := st.recErr == nil
	current := recOK && st.rec.Token >= v.token && st.rec.Token > 0
	if current {
		v.token = st.rec.Token
		if st.rec.Holder != "" {
			v.holder, v.pid, v.ttl = st.rec.Holder, st.rec.PID, st.rec.TTLNS
		}
	}
	switch {
	case !recOK && !errors.Is(st.recErr, fs.ErrNotExist):
		v.problem = "lock file unreadable: " + st.recErr.Error()
	case !recOK && v.token > 0:
		v.problem = "lock file missing"
	case recOK && !current:
		v.problem = fmt.Sprintf("lock file has token %d, behind the guard's %d", st.rec.Token, v.token)
	}
	switch {
	case v.token == 0:
		v.status, v.holder = statusNever, ""
	case current && st.rec.Holder == "":
		v.status, v.holder = statusReleased, ""
	case current && st.rec.Boot != b.bootID:
		v.status, v.holder = statusExpired, ""
		v.problem = "lock file written before the last reboot"
	case !b.alive(name, v.token):
		v.status = statusDead
	case current:
		v.expiresMono = st.rec.ExpiresMonoNS
		v.status = statusHeld
		if nowMono >= v.expiresMono {
			v.status = statusExpired
		}
	default:
		// Alive, but the expiry is unknown (lock file damaged or behind):
		// grant the TTL from now; the repair writes it down.
		v.expiresMono = nowMono + v.ttl
		v.status = statusHeld
	}
	if !v.held() {
		v.expiresMono = 0
	}
	return v
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
	ln *net.UnixListener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// listen opens the tenure socket of token, removing a stale file left at its
// path by an acquirer that died before recording the token. Callers hold the
// guard.
func (b *Backend) listen(name string, token uint64) (*tenure, error) {
	path := b.sockPath(name, token)
	os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("lease/file: listen on tenure socket of %q: %w: %v", name, lease.ErrUnavailable, err)
	}
	t := &tenure{ln: ln, conns: map[net.Conn]struct{}{}}
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

// end closes the tenure socket (unlinking it) and every connection to it, so
// that watchers wake at once.
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

// alive reports whether the tenure of token is alive: this Backend holds it,
// or its socket accepts connections. Only a definite answer (connection
// refused, no socket file) counts as dead; anything else (a full backlog, a
// timeout) counts as alive, which at worst delays a takeover to the TTL.
func (b *Backend) alive(name string, token uint64) bool {
	b.mu.Lock()
	_, mine := b.tenures[tenureKey{name, token}]
	b.mu.Unlock()
	if mine {
		return true
	}
	c, err := net.DialTimeout("unix", b.sockPath(name, token), 200*time.Millisecond)
	if err == nil {
		c.Close()
		return true
	}
	return !(errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT))
}

// maxSocketToken returns the highest token among the tenure socket files of
// name: a floor for the token high-water mark when the guard is damaged.
func (b *Backend) maxSocketToken(name string) uint64 {
	entries, err := os.ReadDir(b.dir)
	if err != nil {
		return 0
	}
	var maxToken uint64
	for _, token := range socketTokens(name, entries) {
		maxToken = max(maxToken, token)
	}
	return maxToken
}

// socketTokens lists the tokens of name's tenure socket files among the
// directory entries.
func socketTokens(name string, entries []os.DirEntry) []uint64 {
	prefix := "." + name + "."
	var tokens []uint64
	for _, e := range entries {
		s, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		s, ok = strings.CutSuffix(s, ".sock")
		if !ok {
			continue
		}
		if token, err := strconv.ParseUint(s, 10, 64); err == nil {
			tokens = append(tokens, token)
		}
	}
	return tokens
}

// removeLeftovers removes what dead processes left behind: the socket files
// of earlier tenures whose processes are dead (crashed holders), and
// temporary records (a writer that died between writing one and replacing
// the lock file; every writer holds the guard, so under the guard any
// temporary record is a leftover). It removes a bounded number of sockets
// per call. A live socket (a stopped holder that lost its lease) stays until
// its process closes it. Callers hold the guard.
func (b *Backend) removeLeftovers(name string, current uint64) {
	const maxPerCall = 16
	removed := 0
	entries, err := os.ReadDir(b.dir)
	if err != nil {
		return
	}
	tmpPrefix := "." + name + ".tmp-"
	for _, e := range entries {
		// os.CreateTemp's suffix is all digits: the files of a lease named
		// "NAME.tmp-x" (".NAME.tmp-x.guard", say) never match.
		suffix, ok := strings.CutPrefix(e.Name(), tmpPrefix)
		if ok && suffix != "" && strings.Trim(suffix, "0123456789") == "" {
			os.Remove(filepath.Join(b.dir, e.Name()))
		}
	}
	for _, token := range socketTokens(name, entries) {
		if token >= current || removed == maxPerCall {
			continue
		}
		if !b.alive(name, token) {
			os.Remove(b.sockPath(name, token))
			removed++
		}
	}
}

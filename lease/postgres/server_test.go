package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"coord/internal/assert"
	"coord/internal/leasekit/leasekittest"
	"coord/lease"
	"coord/lease/leasetest"
)

// server is a PostgreSQL server of the test's own, which it can crash and
// restart on the same port and data directory. As root it runs as the
// postgres user, since PostgreSQL refuses to run as root.
type server struct {
	t    *testing.T
	bin  string
	dir  string
	port int
	cred *syscall.Credential
	cmd  *exec.Cmd
}

func startServer(t *testing.T) *server {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(bins) == 0 {
		leasekittest.ServerURL(t, "COORD_TEST_POSTGRES") // skip or fail as for the shared server
		t.Fatal("no /usr/lib/postgresql/*/bin/postgres, though COORD_TEST_POSTGRES is set")
	}
	sort.Strings(bins)
	dir, err := os.MkdirTemp("", "coord-pg-restart-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &server{t: t, bin: filepath.Dir(bins[len(bins)-1]), dir: filepath.Join(dir, "data"), port: freePort(t)}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(s.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(s.dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	initdb := s.command("initdb", "-D", s.dir, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	s.start()
	t.Cleanup(func() { s.stop(syscall.SIGQUIT) })
	return s
}

func (s *server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

func (s *server) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

func (s *server) start() {
	s.t.Helper()
	s.cmd = s.command("postgres", "-D", s.dir, "-p", strconv.Itoa(s.port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		b, err := lease.Open(ctx, s.url())
		cancel()
		if err == nil {
			b.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("postgres did not accept connections on port %d: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a server's start: nothing to wait on
	}
}

// stop sends sig (SIGQUIT: immediate shutdown, as after a crash, with
// recovery at the next start) and waits for the server to exit.
func (s *server) stop(sig syscall.Signal) {
	if s.cmd != nil && s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Signal(sig)
		_ = s.cmd.Wait()
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// A server that crashes and restarts keeps the lease and its token: while
// it is down, operations fail with ErrUnavailable; afterwards the holder
// renews, and the next token is greater.
func TestServerRestart(t *testing.T) {
	s := startServer(t)
	b := open(t, s.url())
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := b.Acquire(ctx, name, "a", time.Minute)
	assert.That(err == nil, "Acquire: %v", err)

	s.stop(syscall.SIGQUIT)
	leasetest.Unavailable(t, b, name, "a", a.Token, 300*time.Millisecond)

	s.start()
	var r lease.Record
	for attempt := 0; ; attempt++ {
		// The pool may still hold connections from before the crash; each
		// fails once, with ErrUnavailable, and is replaced.
		r, err = b.Renew(ctx, name, "a", a.Token, time.Minute)
		if err == nil || !errors.Is(err, lease.ErrUnavailable) || attempt > 10 {
			break
		}
	}
	assert.That(err == nil && r.Token == a.Token, "Renew after restart: %+v, %v", r, err)
	assert.That(b.Release(ctx, name, "a", a.Token) == nil, "Release failed")
	c, err := b.Acquire(ctx, name, "c", time.Minute)
	assert.That(err == nil && c.Token > a.Token, "Acquire after restart: token %d after %d, %v", c.Token, a.Token, err)
}

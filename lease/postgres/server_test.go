package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"

	"coord/internal/leasekit/leasekittest"
	"coord/lease"
)

// startServer starts a PostgreSQL server of the test's own, in a data
// directory it makes with initdb, which it can crash (SIGQUIT: immediate
// shutdown, with recovery at the next start) and restart on the same port
// and data directory; it returns the server's URL. As root it runs as the
// postgres user, since PostgreSQL refuses to run as root.
func startServer(t *testing.T) (*leasekittest.Server, string) {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(bins) == 0 {
		leasekittest.ServerURL(t, "COORD_TEST_POSTGRES") // skip or fail as for the shared server
		t.Fatal("no /usr/lib/postgresql/*/bin/postgres, though COORD_TEST_POSTGRES is set")
	}
	sort.Strings(bins)
	bin := filepath.Dir(bins[len(bins)-1])
	dir, err := os.MkdirTemp("", "coord-pg-restart-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	cred := postgresCredential(t, dir, data)
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
	if cred != nil {
		initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port := leasekittest.FreePort(t)
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	opts := leasekittest.ServerOptions{Port: port, Ready: leasekittest.Opens(url), StopSignal: syscall.SIGQUIT, Credential: cred}
	s := leasekittest.StartServer(t, opts, filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", data,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off")
	return s, url
}

// postgresCredential returns nil, or as root the postgres user's
// credential, with the data directory data (in dir) made for that user.
func postgresCredential(t *testing.T, dir, data string) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("running as root needs the postgres user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, uid, gid); err != nil {
		t.Fatal(err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// A server that crashes and restarts keeps the lease and its token: while
// it is down, operations fail with ErrUnavailable; afterwards the holder
// renews, and the next token is greater.
func TestServerRestart(t *testing.T) {
	s, url := startServer(t)
	leasekittest.RestartKeepsLease(t, s, leasekittest.Open(t, url), func(ctx context.Context, renew func(context.Context) (lease.Record, error)) (lease.Record, error) {
		for attempt := 0; ; attempt++ {
			// The pool may still hold connections from before the crash;
			// each fails once, with ErrUnavailable, and is replaced.
			r, err := renew(ctx)
			if err == nil || !errors.Is(err, lease.ErrUnavailable) || attempt > 10 {
				return r, err
			}
		}
	})
}

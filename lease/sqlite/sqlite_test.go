package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coord/internal/leasekit/leasekittest"
	"coord/lease"
	"coord/lease/leasetest"
)

// coordBin is the coord command built by TestMain, for the tests that run
// real `coord elect` processes.
var coordBin string

func TestMain(m *testing.M) { os.Exit(leasekittest.MainWithCoord(m, &coordBin)) }

// tempURL returns the URL of a new database file of the test's own.
func tempURL(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "leases.db") }

func TestConformance(t *testing.T) {
	url := tempURL(t)
	leasetest.Run(t, func(t *testing.T) lease.Backend { return leasekittest.Open(t, url) })
}

// Real `coord elect` processes: the leader killed, terminated, stopped.
func TestProcesses(t *testing.T) {
	leasetest.RunProcesses(t, coordBin, tempURL(t), leasetest.ProcessOptions{})
}

// A database whose write lock another process holds makes every write
// wait; the wait ends with ErrUnavailable when the caller's context is done,
// not at the (longer) busy timeout.
func TestLockedDatabaseIsUnavailable(t *testing.T) {
	url := tempURL(t)
	b := leasekittest.Open(t, url)
	ctx := context.Background()
	if _, err := b.Get(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", url[len("sqlite://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK")

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = b.Acquire(short, "x", "a", time.Second)
	if !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Acquire on a locked database: want ErrUnavailable, got %v", err)
	}
}

func TestTokensSurviveReopen(t *testing.T) {
	url := tempURL(t)
	ctx := context.Background()
	b := leasekittest.Open(t, url)
	a, err := b.Acquire(ctx, "n", "a", time.Minute)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if err := b.Release(ctx, "n", "a", a.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	b2 := leasekittest.Open(t, url)
	got, err := b2.Get(ctx, "n")
	if !(err == nil && got.Free() && got.Token == a.Token) {
		t.Fatalf("Get after reopen: %+v, %v", got, err)
	}
	c, err := b2.Acquire(ctx, "n", "c", time.Minute)
	if err != nil || c.Token <= a.Token {
		t.Fatalf("Acquire after reopen: token %d after %d, %v", c.Token, a.Token, err)
	}
}

// Deleting the database file (or losing it with a tmpfs at reboot) does not
// restart the tokens: the next one is floored by the wall clock.
func TestTokensGrowWhenTheFileIsDeleted(t *testing.T) {
	url := tempURL(t)
	path := strings.TrimPrefix(url, "sqlite://")
	ctx := context.Background()
	var last uint64
	for round := range 3 {
		b := leasekittest.Open(t, url)
		for range 2 {
			a, err := b.Acquire(ctx, "n", "a", time.Minute)
			if err != nil {
				t.Fatalf("round %d: Acquire: %v", round, err)
			}
			if a.Token <= last {
				t.Fatalf("round %d: token %d after %d", round, a.Token, last)
			}
			last = a.Token
			if err := b.Release(ctx, "n", "a", a.Token); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
		if err := b.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
	}
}

// A lease written during an earlier boot is expired: its holder died with
// that boot, and CLOCK_BOOTTIME restarted from zero.
func TestLeaseFromEarlierBootIsExpired(t *testing.T) {
	ctx := context.Background()
	b := leasekittest.Open(t, tempURL(t)).(*Backend)
	a, err := b.Acquire(ctx, "n", "a", time.Hour)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if _, err := b.db.ExecContext(ctx, `UPDATE coord_lease SET boot = 'an-earlier-boot' WHERE name = 'n'`); err != nil {
		t.Fatal(err)
	}
	got, err := b.Get(ctx, "n")
	if !(err == nil && got.Free() && got.Token == a.Token) {
		t.Fatalf("Get of an earlier boot's lease: %+v, %v", got, err)
	}
	c, err := b.Acquire(ctx, "n", "c", time.Minute)
	if err != nil || c.Token <= a.Token {
		t.Fatalf("Acquire: token %d after %d, %v", c.Token, a.Token, err)
	}
}

func TestBadURLs(t *testing.T) {
	leasekittest.OpenFails(t, lease.ErrInvalid,
		"sqlite://host/leases.db",
		"sqlite:relative.db",
		"sqlite:///tmp/x.db?poll=fast",
		"sqlite:///tmp/x.db?color=blue",
		"sqlite:///tmp/x.db?busy_timeout=0s",
		"sqlite://"+filepath.Join(t.TempDir(), "no", "such", "dir.db")) // a missing directory
	if os.Geteuid() != 0 { // root writes anywhere
		ro := t.TempDir()
		if err := os.Chmod(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		leasekittest.OpenFails(t, lease.ErrInvalid, "sqlite://"+filepath.Join(ro, "leases.db")) // a read-only directory
	}
}

package file

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A lock directory moved away, and another made at its path, between an
// acquisition's read and its commit: the acquisition does not stand in
// the moved directory (where it would lead beside a holder at the path)
// but is made again at the path.
func TestDirectoryMovedDuringAcquireTakesTheLeaseAtThePath(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "locks")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := Open(filepath.Join(dir, "leader.lock"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	moved := false
	testHookFunc = func(point string) {
		if point != "before-commit" || moved {
			return
		}
		moved = true
		if err := os.Rename(dir, dir+".old"); err != nil {
			t.Error(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Error(err)
		}
	}
	defer func() { testHookFunc = nil }()
	rec, err := b.Acquire(ctx, "leader.lock", "alice", time.Minute)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if !moved {
		t.Fatal("the hook never ran: the test moved nothing")
	}
	// A second backend at the path sees alice's lease: it was taken in
	// the directory at the path, not in the one moved away.
	other, err := Open(filepath.Join(dir, "leader.lock"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	got, err := other.Get(ctx, "leader.lock")
	if err != nil {
		t.Fatal(err)
	}
	if got.Holder != "alice" || got.Token != rec.Token {
		t.Fatalf("at the path the lease is %+v; want alice's, token %d", got, rec.Token)
	}
}

//go:build linux

package file

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// A record written before a reboot counts as expired, and tokens issued
// after the reboot are above everything reserved before it.
func TestRebootExpiresLeasesAndKeepsTokensGrowing(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leader.lock")
	before, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	rec, err := before.Acquire(ctx, "leader.lock", "alice", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	after, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	after.bootID = "another-boot" // as if the machine had restarted
	next, err := after.Acquire(ctx, "leader.lock", "bob", time.Hour)
	if err != nil {
		t.Fatalf("Acquire after a reboot over alice's hour-long lease: %v", err)
	}
	if next.Token <= rec.Token {
		t.Errorf("token after reboot %d, want > %d", next.Token, rec.Token)
	}
}

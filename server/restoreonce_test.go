package server

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coord/storage/snapshot"
)

// A node restarting on a snapshot whose data was damaged on disk refuses
// to start, with an error naming the file (Open reads only its header; the
// restore, reading the file once, verifies it), and changes nothing: put
// back intact, the same directory starts and holds every write.
func TestRestartOnADamagedSnapshotFailsAndLosesNothing(t *testing.T) {
	c := newTestCluster(t, 1)
	for i := range 120 { // past SnapshotEntries (50): a snapshot file
		propose(t, c, Command{Op: OpPut, Key: fmt.Sprintf("k%03d", i), Value: []byte(fmt.Sprint(i))})
	}
	n := c.nodes[1]
	deadline := time.After(30 * time.Second)
	for {
		changed := n.StatusChanged()
		if snap, err := n.disk.Snapshot(); err == nil && snap.Metadata.Index > 0 {
			break
		}
		if !waitAny([]<-chan struct{}{changed}, deadline) {
			t.Fatal("no snapshot within 30s")
		}
	}
	dir := n.dir
	c.crash(1)
	files, err := filepath.Glob(filepath.Join(dir, "snap", "*.snap"))
	if err != nil || len(files) == 0 {
		t.Fatalf("snapshot files %v, %v: want one at least", files, err)
	}
	// A second snapshot may have been made durable just before the crash,
	// its predecessor not yet removed: the newest (names sort by index) is
	// the one a restart restores.
	newest := files[len(files)-1]
	intact, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Clone(intact)
	damaged[len(damaged)-20] ^= 0x10 // in the data, before the trailer
	if err := os.WriteFile(newest, damaged, 0o644); err != nil {
		t.Fatal(err)
	}

	cfg := DefaultConfig()
	cfg.ID, cfg.Peers, cfg.DataDir, cfg.Logger = 1, c.peers, dir, quiet
	l, err := net.Listen("tcp", c.peers[1])
	if err != nil {
		t.Skipf("cannot rebind %s: %v", c.peers[1], err)
	}
	cfg.PeerListener = l
	_, err = NewNode(cfg)
	l.Close()
	if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(newest)) {
		t.Fatalf("NewNode on a damaged snapshot: %v, want ErrCorrupt naming the file", err)
	}
	if after, _ := os.ReadFile(newest); !bytes.Equal(after, damaged) {
		t.Fatal("the failed start changed the snapshot file")
	}

	if err := os.WriteFile(newest, intact, 0o644); err != nil {
		t.Fatal(err)
	}
	back := c.restart(1, dir)
	waitApplied(t, back, 30*time.Second, "every write back after the restart", func(v View) bool {
		for i := range 120 {
			if kv, ok := v.Get(fmt.Sprintf("k%03d", i)); !ok || string(kv.Value) != fmt.Sprint(i) {
				return false
			}
		}
		return true
	})
}

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
	// Wait until the Disk's snapshot is the last one this run takes: none
	// due, none being written in the background. A node stopped while a
	// background snapshot is written leaves that file durable under its
	// final name but not yet the log's checkpoint; the restart removes it
	// and restores the older file the log names. Damaging the newest file
	// then tested nothing, and NewNode succeeded: the test failed now and
	// then under load, when the last snapshot was still being written at
	// the crash. No status change need follow the snapshot's install, so
	// the condition is looked at again every 10 ms too.
	var want string
	deadline := time.After(30 * time.Second)
	retry := time.NewTicker(10 * time.Millisecond)
	defer retry.Stop()
	for {
		changed := n.StatusChanged()
		snap, err := n.disk.Snapshot()
		if err == nil && snap.Metadata.Index > 0 && snap.Metadata.Index+n.cfg.SnapshotEntries > n.Status().Applied {
			want = snapshot.FileName(snap.Metadata.Index, snap.Metadata.Term)
			break
		}
		select {
		case <-changed:
		case <-retry.C:
		case <-deadline:
			t.Fatalf("no settled snapshot within 30s (the Disk's: %+v, %v; applied %d)", snap.Metadata, err, n.Status().Applied)
		}
	}
	dir := n.dir
	c.crash(1)
	files, err := filepath.Glob(filepath.Join(dir, "snap", "*.snap"))
	if err != nil || len(files) != 1 || filepath.Base(files[0]) != want {
		t.Fatalf("snapshot files %v, %v: want %s alone, the one the log refers to", files, err, want)
	}
	file := files[0]
	intact, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Clone(intact)
	damaged[len(damaged)-20] ^= 0x10 // in the data, before the trailer
	if err := os.WriteFile(file, damaged, 0o644); err != nil {
		t.Fatal(err)
	}

	cfg := DefaultConfig()
	cfg.ID, cfg.Peers, cfg.DataDir, cfg.Logger = 1, c.peers, dir, quiet
	l, err := net.Listen("tcp", c.peers[1])
	if err != nil {
		t.Skipf("cannot rebind %s: %v", c.peers[1], err)
	}
	cfg.PeerListener = l
	started, err := NewNode(cfg)
	if err == nil {
		started.Close() // the failure below, without a node left running on dir
	}
	l.Close()
	if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(file)) {
		t.Fatalf("NewNode on a damaged snapshot: %v, want ErrCorrupt naming the file", err)
	}
	if after, _ := os.ReadFile(file); !bytes.Equal(after, damaged) {
		t.Fatal("the failed start changed the snapshot file")
	}

	if err := os.WriteFile(file, intact, 0o644); err != nil {
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

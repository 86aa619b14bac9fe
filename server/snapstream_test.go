package server

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A new member, over real TCP on loopback with its own data directory,
// catches up by a snapshot that the leader streams from its file and the
// member spools to its data directory and adopts there: afterwards its
// snapshot directory holds the one snapshot file, no spool is left, and
// its state has the keys written before it joined.
func TestNewMemberCatchesUpByAStreamedSnapshot(t *testing.T) {
	c := newTestCluster(t, 3)
	value := bytes.Repeat([]byte("v"), 4096) // a snapshot of many chunks (256 KiB each)
	for i := range 200 {                     // past SnapshotEntries (50): the log is compacted
		propose(t, c, Command{Op: OpPut, Key: fmt.Sprintf("before/%03d", i), Value: value})
	}
	leader := c.waitLeader()
	n4 := c.startJoiner(4, leader)
	if err := c.nodes[leader].AddMember(ctx(t), 4, c.peers[4]); err != nil {
		t.Fatalf("add member: %v", err)
	}
	writeAndWait(t, c, n4, "after-join")
	snap, err := n4.disk.Snapshot()
	if err != nil || snap.Metadata.Index == 0 {
		t.Fatalf("the new member has no snapshot (%v): this test is about snapshots", err)
	}
	entries, err := os.ReadDir(filepath.Join(n4.dir, "snap"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".snap") {
			t.Errorf("the new member's snapshot directory holds %s after the install", e.Name())
		}
	}
	n4.sm.mu.RLock()
	defer n4.sm.mu.RUnlock()
	for i := range 200 {
		kv, ok := n4.sm.machine.Get(fmt.Sprintf("before/%03d", i))
		if !ok || !bytes.Equal(kv.Value, value) {
			t.Fatalf("the new member lacks before/%03d", i)
		}
	}
}

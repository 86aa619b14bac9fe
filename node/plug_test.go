package node

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"

	"coord/storage/raftstore"
	"coord/storage/vfs"
	"coord/transport/tcp"
)

// The real parts plug in as they are.
var (
	_ Transport = (*tcp.Transport)(nil)
	_ Storage   = (*raftstore.Disk)(nil)
)

// A cluster on the durable storage: a node loses power (its file system
// keeps only what was synced), restarts from what is left (the WAL replays),
// and catches up. The simulator's --disk mode tests the same storage under
// every fault, with crashes in the middle of writes.
func TestDurableStorageSurvivesPowerLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		discard := slog.New(slog.DiscardHandler)
		disks := map[uint64]*vfs.MemFS{1: vfs.NewMemFS(), 2: vfs.NewMemFS(), 3: vfs.NewMemFS()}
		open := func(id uint64) Storage {
			d, err := raftstore.Open(disks[id], "/data", raftstore.Options{Logger: discard})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		c := &testCluster{t: t, net: NewMemoryNetwork(), members: map[uint64]*member{}}
		for _, id := range []uint64{1, 2, 3} {
			c.start(id, open(id), []uint64{1, 2, 3})
		}
		t.Cleanup(c.stopAll)
		leader := c.waitLeader(0)
		ctx := context.Background()
		for i := range 10 {
			if _, err := leader.node.Propose(ctx, fmt.Appendf(nil, "k%d=%d", i, i)); err != nil {
				t.Fatal(err)
			}
		}
		// Power loss on a follower: stop it and crash its file system.
		var victim uint64
		for id, m := range c.members {
			if m != leader {
				victim = id
				break
			}
		}
		c.stop(victim)
		disks[victim].Crash()
		restarted := c.start(victim, open(victim), nil)
		waitUntil(t, fmt.Sprintf("node %d did not recover k9 after power loss", victim), nodesOf(restarted), func() bool {
			return restarted.sm.get("k9") == "9"
		})
	})
}

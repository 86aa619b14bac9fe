package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"coord/storage/raftstore"
	"coord/storage/vfs"
)

// disk is one node's durable storage on a file system that can fill up.
type disk struct {
	mem   *vfs.MemFS
	fault *vfs.FaultFS
}

func newDisk(seed uint64) *disk {
	mem := vfs.NewMemFS()
	return &disk{mem: mem, fault: vfs.NewFaultFS(mem, seed, nil)}
}

func (d *disk) open(t *testing.T) *raftstore.Disk {
	t.Helper()
	s, err := raftstore.Open(d.fault, "/data", raftstore.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitStorage waits until the node's storage is failing (or working, if
// !failing), and returns the error it reports.
func waitStorage(t *testing.T, n *Node, failing bool) error {
	t.Helper()
	for {
		changed := n.Changed()
		if err := n.StorageError(); (err != nil) == failing {
			return err
		}
		select {
		case <-changed:
		case <-time.After(30 * time.Second):
			t.Fatalf("node %d: storage failing is not %v after 30s (status %+v)", n.ID(), failing, n.Status())
		}
	}
}

// A single node whose disk fills up: the write in flight stays unanswered
// (its outcome is unknown), new writes and reads are refused at once with
// ErrStorage saying the disk is full, the node stays up; when space
// returns it resumes on its own, the write in flight applies, new writes
// succeed, and after a power loss nothing acknowledged is missing.
func TestDiskFullThenSpaceReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDisk(1)
		c := &testCluster{t: t, net: NewMemoryNetwork(), members: map[uint64]*member{}}
		m := c.start(1, d.open(t), []uint64{1})
		t.Cleanup(c.stopAll)
		c.waitLeader(0)
		ctx := context.Background()
		for i := range 4 {
			if _, err := m.node.Propose(ctx, fmt.Appendf(nil, "k%d=%d", i, i)); err != nil {
				t.Fatal(err)
			}
		}

		// The last write is answered once applied, which may be before its
		// Ready's write of the commit index: let the loop finish that write
		// (go idle) so that the disk fills with the next write, not this one.
		synctest.Wait()
		d.fault.SetInjector(vfs.NoSpace())
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := m.node.Propose(wctx, []byte("inflight=1"))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Propose as the disk fills: %v, want no answer before the deadline (outcome unknown)", err)
		}
		serr := waitStorage(t, m.node, true)
		if !errors.Is(serr, ErrStorage) || !vfs.IsNoSpace(serr) {
			t.Fatalf("StorageError() = %v, want ErrStorage wrapping ENOSPC", serr)
		}
		if _, err := m.node.Propose(ctx, []byte("refused=1")); !errors.Is(err, ErrStorage) || !vfs.IsNoSpace(err) {
			t.Fatalf("Propose on a full disk: %v, want ErrStorage wrapping ENOSPC", err)
		}
		if err := m.node.ReadIndex(ctx); !errors.Is(err, ErrStorage) {
			t.Fatalf("ReadIndex on a full disk: %v, want ErrStorage", err)
		}
		time.Sleep(5 * time.Second) // synctest's clock: the node retries on every tick meanwhile
		if m.node.Err() != nil {
			t.Fatalf("the node stopped on a full disk: %v", m.node.Err())
		}

		d.fault.SetInjector(nil) // space returns
		waitStorage(t, m.node, false)
		if _, err := m.node.Propose(ctx, []byte("after=1")); err != nil {
			t.Fatalf("Propose once space returned: %v", err)
		}
		if got := m.sm.get("inflight"); got != "1" {
			t.Errorf("the write in flight when the disk filled: %q, want it applied once the disk had space", got)
		}
		if got := m.sm.get("refused"); got != "" {
			t.Errorf("a write refused with ErrStorage was applied: %q", got)
		}

		c.stop(1)
		d.mem.Crash()
		d.fault.SetInjector(nil)
		m = c.start(1, d.open(t), nil)
		c.waitLeader(0)
		if err := m.node.ReadIndex(ctx); err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]string{"k0": "0", "k3": "3", "inflight": "1", "after": "1"} {
			if got := m.sm.get(k); got != want {
				t.Errorf("after a power loss %s = %q, want %q", k, got, want)
			}
		}
	})
}

// The leader's disk fills: it stops answering (no heartbeats go out, since
// nothing it decides can be persisted), the others elect a new leader and
// go on taking writes; when space returns the old leader resumes, learns
// of the new term, and catches up, with every acknowledged write.
func TestLeaderDiskFullClusterGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		disks := map[uint64]*disk{1: newDisk(1), 2: newDisk(2), 3: newDisk(3)}
		c := &testCluster{t: t, net: NewMemoryNetwork(), members: map[uint64]*member{}}
		for id, d := range disks {
			c.start(id, d.open(t), []uint64{1, 2, 3})
		}
		t.Cleanup(c.stopAll)
		ctx := context.Background()
		old := c.waitLeader(0)
		if _, err := old.node.Propose(ctx, []byte("before=1")); err != nil {
			t.Fatal(err)
		}
		oldID := old.node.ID()
		disks[oldID].fault.SetInjector(vfs.NoSpace())
		// Something to write: the next proposal (or heartbeat round) meets
		// the full disk.
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, _ = old.node.Propose(pctx, []byte("lost=maybe"))
		cancel()
		waitStorage(t, old.node, true)
		leader := c.waitLeader(oldID)
		for i := range 5 {
			if _, err := leader.node.Propose(ctx, fmt.Appendf(nil, "during%d=%d", i, i)); err != nil {
				t.Fatalf("write while the old leader's disk is full: %v", err)
			}
		}
		disks[oldID].fault.SetInjector(nil)
		waitStorage(t, old.node, false)
		waitUntil(t, "old leader did not catch up", nodesOf(old), func() bool {
			return old.sm.get("during4") == "4"
		})
		if got := old.sm.get("before"); got != "1" {
			t.Errorf("old leader lost an acknowledged write: before = %q", got)
		}
	})
}

package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/vfs"
)

// viewKV is kv with point-in-time views whose writing waits until the test
// releases it: the snapshot stays "being written" while the test goes on.
type viewKV struct {
	*kv
	started chan map[string]string // the view's state, when its writing starts
	release chan struct{}
}

func (s *viewKV) SnapshotView() (io.WriterTo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return gatedView{state: maps.Clone(s.data), s: s}, nil
}

type gatedView struct {
	state map[string]string
	s     *viewKV
}

func (v gatedView) WriteTo(w io.Writer) (int64, error) {
	select {
	case v.s.started <- v.state:
		<-v.s.release
	default: // a later snapshot than the one the test holds
	}
	b, err := json.Marshal(v.state)
	if err != nil {
		return 0, err
	}
	n, err := w.Write(b)
	return int64(n), err
}

// TestSnapshotInBackground holds a snapshot's writing open while the node
// goes on committing and applying writes (with the snapshot on the loop,
// those writes would never finish), then lets it finish: the snapshot
// stored is the state at the index it was taken at, not later, the log is
// compacted to it, and a restart restores every write from it and the log.
func TestSnapshotInBackground(t *testing.T) {
	for _, disk := range []bool{false, true} {
		t.Run(fmt.Sprintf("disk=%v", disk), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testSnapshotInBackground(t, disk) })
		})
	}
}

func testSnapshotInBackground(t *testing.T, disk bool) {
	fsys := vfs.NewMemFS()
	open := func() Storage {
		if !disk {
			return NewMemoryStorage()
		}
		d, err := raftstore.Open(fsys, "/node", raftstore.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	start := func(storage Storage, held bool) (*Node, *viewKV) {
		sm := &viewKV{kv: newKV(), started: make(chan map[string]string, 1), release: make(chan struct{})}
		if !held {
			close(sm.release)
		}
		cfg := DefaultConfig()
		cfg.Raft.ID, cfg.Raft.Peers = 1, []uint64{1}
		cfg.Raft.Rand = rand.New(rand.NewPCG(1, 7))
		cfg.Storage, cfg.Transport, cfg.StateMachine = storage, NewMemoryNetwork().Transport(1), sm
		cfg.TickInterval = 10 * time.Millisecond
		cfg.SnapshotEntries = 5
		cfg.SnapshotLogPercent = 0 // every 5 entries, however small the log
		n, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return n, sm
	}
	storage := open()
	n, sm := start(storage, true)
	released := false
	defer func() { // on a failure, so that the node can stop
		if !released {
			close(sm.release)
		}
		_ = n.Stop()
	}()
	for {
		changed := n.Changed()
		if n.Status().Role == raft.Leader {
			break
		}
		<-changed
	}
	ctx := context.Background()
	written := 0
	propose := func() {
		t.Helper()
		if _, err := n.Propose(ctx, fmt.Appendf(nil, "k%d=v%d", written, written)); err != nil {
			t.Fatal(err)
		}
		written++
	}
	var atView map[string]string
	for atView == nil {
		if written == 50 {
			t.Fatal("no snapshot began in the background after 50 writes")
		}
		propose()
		synctest.Wait() // a snapshot begun is now held in WriteTo
		select {
		case atView = <-sm.started:
		default:
		}
	}
	// The snapshot is being written: the node goes on meanwhile.
	for range 20 {
		propose()
	}
	if len(atView) >= written {
		t.Fatalf("the view holds %d keys, the node %d: the view changed with the state", len(atView), written)
	}
	close(sm.release)
	released = true
	synctest.Wait() // the snapshot written, and its end handled on the loop
	var snap raft.Snapshot
	var first uint64
	err := n.do(ctx, func() {
		snap, _ = storage.Snapshot()
		first, _ = storage.FirstIndex()
	})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(snapshotData(t, snap), &got); err != nil {
		t.Fatalf("the stored snapshot (index %d) does not decode: %v", snap.Metadata.Index, err)
	}
	if !maps.Equal(got, atView) || first != snap.Metadata.Index+1 {
		t.Fatalf("stored snapshot at %d holds %d keys, want the view's %d; first index %d, want %d",
			snap.Metadata.Index, len(got), len(atView), first, snap.Metadata.Index+1)
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if !disk {
		return
	}
	if err := storage.(*raftstore.Disk).Close(); err != nil {
		t.Fatal(err)
	}
	n, sm = start(open(), false)
	last, want := fmt.Sprintf("k%d", written-1), fmt.Sprintf("v%d", written-1)
	for {
		changed := n.Changed()
		if sm.kv.get(last) == want {
			break
		}
		<-changed
	}
	sm.kv.mu.Lock()
	keys := len(sm.kv.data)
	sm.kv.mu.Unlock()
	if keys != written {
		t.Fatalf("after a restart: %d keys, want %d", keys, written)
	}
}

// snapshotData reads a snapshot's data, from Data or its Source.
func snapshotData(t *testing.T, snap raft.Snapshot) []byte {
	t.Helper()
	r, err := snap.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestSnapshotAfterSnapshotBytes: a few large entries take a snapshot once
// SnapshotBytes of them were applied, long before SnapshotEntries; without
// SnapshotBytes they do not.
func TestSnapshotAfterSnapshotBytes(t *testing.T) {
	for _, bound := range []uint64{0, 4096} {
		t.Run(fmt.Sprintf("bytes=%d", bound), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				storage := NewMemoryStorage()
				cfg := DefaultConfig()
				cfg.Raft.ID, cfg.Raft.Peers = 1, []uint64{1}
				cfg.Raft.Rand = rand.New(rand.NewPCG(1, 7))
				cfg.Storage, cfg.Transport, cfg.StateMachine = storage, NewMemoryNetwork().Transport(1), newKV()
				cfg.TickInterval = 10 * time.Millisecond
				cfg.SnapshotEntries, cfg.SnapshotBytes = 1000, bound
				cfg.SnapshotLogPercent = 0 // SnapshotBytes alone
				n, err := Start(cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer n.Stop()
				waitUntil(t, "no leader", func() []*Node { return []*Node{n} }, func() bool { return n.Status().Role == raft.Leader })
				ctx := context.Background()
				value := make([]byte, 1000)
				for i := range value {
					value[i] = 'v'
				}
				for i := range 9 { // 9,000 bytes: one snapshot after the fifth, none after
					if _, err := n.Propose(ctx, fmt.Appendf(nil, "k%d=%s", i, value)); err != nil {
						t.Fatal(err)
					}
				}
				synctest.Wait()
				last := n.Status().Applied
				var snap raft.Snapshot
				if err := n.do(ctx, func() { snap, _ = storage.Snapshot() }); err != nil {
					t.Fatal(err)
				}
				got := snap.Metadata.Index
				switch {
				case bound == 0 && got != 0:
					t.Fatalf("a snapshot at %d after 10 entries, with SnapshotEntries 1000 and no SnapshotBytes", got)
				case bound != 0 && (got == 0 || got == last || last-got >= 5):
					// At last: a snapshot at every entry once 4 KB were
					// applied, not once per 4 KB.
					t.Fatalf("snapshot at %d after entries up to %d of 1 KB each: want one 4 KB into them and none in the last 4 KB", got, last)
				}
			})
		})
	}
}

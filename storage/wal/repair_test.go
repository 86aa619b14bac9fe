package wal_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"coord/raft"
	"coord/storage/vfs"
	"coord/storage/wal"
)

// runRepairing runs ops on a WAL whose file system fails at random, as a
// failing or full disk does. After every failure it repairs the WAL (each
// repair may fail too, and is tried again) and appends again every batch
// since the last acknowledgment, as a node retrying its unacknowledged
// writes does. It returns the model state after all ops and the number of
// failures seen.
func runRepairing(t *testing.T, w *wal.WAL, ops []op) (wal.State, int) {
	t.Helper()
	var (
		cur, synced wal.State
		pending     []op // appended since the last acknowledgment
		failures    int
	)
	repair := func(err error) {
		t.Helper()
		failures++
		if !errors.Is(err, wal.ErrFailed) {
			t.Fatalf("failure %v does not wrap ErrFailed", err)
		}
		for attempt := 0; ; attempt++ {
			if attempt == 1000 {
				t.Fatalf("Repair failed 1000 times in a row: %v", err)
			}
			if err = w.Repair(); err == nil {
				break
			}
		}
		cur = synced
	}
	// do runs one op; false if it failed and was repaired (run it again).
	do := func(o op) bool {
		t.Helper()
		var err error
		switch {
		case o.sync:
			if err = w.Sync(); err == nil {
				synced, pending = cur, nil
				return true
			}
		case o.checkpoint != nil:
			if o.checkpoint.Index < cur.LastIndex() {
				o.ents = slices.Clone(cur.Entries[o.checkpoint.Index-cur.Checkpoint.Index:])
			} else {
				o.ents = nil
			}
			if err = w.Checkpoint(*o.checkpoint, o.hs, o.ents); err == nil {
				cur = apply(cur, o)
				synced, pending = cur, nil
				return true
			}
		default:
			if err = w.Append(o.hs, o.ents); err == nil {
				cur = apply(cur, o)
				pending = append(pending, o)
				return true
			}
		}
		repair(err)
		return false
	}
	for _, o := range ops {
		if len(o.ents) == 0 && o.hs.IsEmpty() && !o.sync && o.checkpoint == nil {
			continue
		}
		for !do(o) {
			// The repair dropped everything since the last acknowledgment:
			// append it again, then retry o.
			for redo := slices.Clone(pending); len(redo) > 0; {
				pending = nil
				cur = synced
				ok := true
				for _, p := range redo {
					if ok = do(p); !ok {
						break
					}
				}
				if ok {
					break
				}
			}
		}
	}
	for !do(op{sync: true}) {
		for _, p := range slices.Clone(pending) {
			pending = nil
			do(p)
		}
	}
	return cur, failures
}

// A WAL on a disk that fails now and then (errors and short writes on any
// operation, the repairs included) stays usable through Repair, and what
// was acknowledged, with everything written again after each repair, is
// exactly what a crash leaves and Open recovers.
func TestRepairAfterFailures(t *testing.T) {
	for seed := range uint64(6) {
		for _, fault := range []vfs.Fault{vfs.FaultError, vfs.FaultShortWrite} {
			mem := vfs.NewMemFS()
			fsys := vfs.NewFaultFS(mem, seed, nil)
			w, _ := open(t, fsys, "/wal", opts(wal.MinSegmentBytes))
			fsys.SetInjector(vfs.Probabilistic(seed, 0.04, fault))
			want, failures := runRepairing(t, w, workload(seed, 200))
			if failures < 5 {
				t.Fatalf("seed %d: only %d failures injected", seed, failures)
			}
			fsys.SetInjector(nil)
			mem.Crash()
			_, got := open(t, mem, "/wal", opts(wal.MinSegmentBytes))
			if !equalState(got, want) {
				t.Fatalf("seed %d fault %d: after %d repaired failures, recovered %s\nwant %s", seed, fault, failures, describe(got), describe(want))
			}
		}
	}
}

// Out of space: a write fails with ENOSPC (part of it written), nothing
// more can be written until space returns; Repair fails while it cannot
// even do its own work, then succeeds, and the log goes on.
func TestRepairWhenSpaceReturns(t *testing.T) {
	mem := vfs.NewMemFS()
	fsys := vfs.NewFaultFS(mem, 7, nil)
	w, _ := open(t, fsys, "/wal", opts(0))
	must(t, w.Append(raft.HardState{Term: 1, Vote: 1}, ents(1, 3, 1)))
	must(t, w.Sync())
	fsys.SetInjector(vfs.NoSpace())
	err := w.Append(raft.HardState{Term: 1, Vote: 1, Commit: 3}, ents(4, 3, 1))
	if !errors.Is(err, wal.ErrFailed) || !vfs.IsNoSpace(err) {
		t.Fatalf("Append on a full disk: %v, want ErrFailed and ENOSPC", err)
	}
	if err := w.Append(raft.HardState{}, ents(4, 1, 1)); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("Append after a failure, before Repair: %v, want ErrFailed", err)
	}
	fsys.SetInjector(vfs.FailNth(1, vfs.FaultError, vfs.OpTruncate))
	if err := w.Repair(); err == nil || !strings.Contains(err.Error(), "truncate") {
		t.Fatalf("Repair with a failing truncate: %v, want an error naming it", err)
	}
	fsys.SetInjector(nil) // space returns
	must(t, w.Repair())
	must(t, w.Repair()) // nothing to do
	must(t, w.Append(raft.HardState{Term: 1, Vote: 1, Commit: 3}, ents(4, 3, 1)))
	must(t, w.Sync())
	must(t, w.Close())
	mem.Crash()
	_, st := open(t, mem, "/wal", opts(0))
	want := wal.State{HardState: raft.HardState{Term: 1, Vote: 1, Commit: 3}, Entries: ents(1, 6, 1)}
	if !equalState(st, want) {
		t.Fatalf("recovered %s, want %s", describe(st), describe(want))
	}
}

// A disk too full for the next preallocation step: the Append goes on
// without it (the write extends the file, as without preallocation, and
// would meet the full disk itself), every later write tries to allocate
// again, and once space returns the segment is allocated ahead again.
func TestAllocateNoSpace(t *testing.T) {
	mem := vfs.NewMemFS()
	fsys := vfs.NewFaultFS(mem, 8, nil)
	o := opts(4096)
	o.PreallocateBytes = wal.MinSegmentBytes
	w, _ := open(t, fsys, "/wal", o)
	refused := 0
	full := func(op vfs.Op) vfs.Fault {
		if op.Kind == vfs.OpAllocate {
			refused++
			return vfs.FaultNoSpace
		}
		return vfs.NoFault
	}
	fsys.SetInjector(full)
	var last uint64
	for refused < 3 {
		last++
		must(t, w.Append(raft.HardState{Term: 1, Commit: last - 1}, ents(last, 1, 1)))
		must(t, w.Sync())
	}
	fsys.SetInjector(nil) // space returns
	for range 3 {
		last++
		must(t, w.Append(raft.HardState{Term: 1, Commit: last - 1}, ents(last, 1, 1)))
	}
	must(t, w.Sync())
	mem.Crash()
	_, st := open(t, mem, "/wal", o)
	if want := (wal.State{HardState: raft.HardState{Term: 1, Commit: last - 1}, Entries: ents(1, last, 1)}); !equalState(st, want) {
		t.Fatalf("recovered %s, want %s", describe(st), describe(want))
	}
}

// The newest segment deleted: the segment before it ends by naming it, so
// the loss is reported, never taken for the end of the log.
func TestMissingNewestSegmentIsCorrupt(t *testing.T) {
	fsys := vfs.NewMemFS()
	w, _ := open(t, fsys, "/wal", opts(wal.MinSegmentBytes))
	for i := uint64(1); i <= 40; i++ {
		must(t, w.Append(raft.HardState{Term: 1, Commit: i - 1}, ents(i, 1, 1)))
		must(t, w.Sync())
	}
	must(t, w.Close())
	names, err := fsys.List("/wal")
	must(t, err)
	if len(names) < 3 {
		t.Fatalf("want several segments, got %v", names)
	}
	must(t, fsys.Remove("/wal/"+names[len(names)-1]))
	_, _, err = wal.Open(fsys, "/wal", opts(wal.MinSegmentBytes))
	if !errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), names[len(names)-1]+" is missing") {
		t.Fatalf("Open without the newest segment: %v, want ErrCorrupt naming %s", err, names[len(names)-1])
	}
}

// RequireExisting: a log that must exist and does not is ErrMissing, not a
// new empty log.
func TestRequireExisting(t *testing.T) {
	fsys := vfs.NewMemFS()
	o := opts(0)
	o.RequireExisting = true
	if _, _, err := wal.Open(fsys, "/wal", o); !errors.Is(err, wal.ErrMissing) {
		t.Fatalf("Open of an absent directory: %v, want ErrMissing", err)
	}
	w, _ := open(t, fsys, "/wal", opts(0))
	must(t, w.Append(raft.HardState{Term: 2, Vote: 1}, ents(1, 2, 2)))
	must(t, w.Close())
	w, st := open(t, fsys, "/wal", o)
	must(t, w.Close())
	if len(st.Entries) != 2 {
		t.Fatalf("recovered %s", describe(st))
	}
	names, err := fsys.List("/wal")
	must(t, err)
	for _, name := range names {
		must(t, fsys.Remove("/wal/"+name))
	}
	if _, _, err := wal.Open(fsys, "/wal", o); !errors.Is(err, wal.ErrMissing) {
		t.Fatalf("Open of an emptied directory: %v, want ErrMissing", err)
	}
	if got, err := fsys.List("/wal"); err != nil || len(got) != 0 {
		t.Fatalf("the refused Open left %v (%v) in the directory", got, err)
	}
}

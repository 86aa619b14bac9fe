package wal_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"coord/internal/assert"
	"coord/raft"
	"coord/storage/vfs"
	"coord/storage/wal"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// opts returns options that remove replaced segments in place, inside
// Checkpoint, as before they moved to the background: a test that crashes
// the file system then sees the same operations in the same order every
// run (the background removal has tests of its own).
func opts(segmentBytes int64) wal.Options {
	return wal.Options{SegmentBytes: segmentBytes, Logger: quiet, Background: inPlace}
}

// inPlace is an Options.Background that runs work at once.
func inPlace(work func()) { work() }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ents(first, n, term uint64) []raft.Entry {
	var out []raft.Entry
	for i := range n {
		out = append(out, raft.Entry{Term: term, Index: first + i, Data: []byte(fmt.Sprintf("e%d-t%d", first+i, term))})
	}
	return out
}

func open(t *testing.T, fsys vfs.FS, dir string, o wal.Options) (*wal.WAL, wal.State) {
	t.Helper()
	w, st, err := wal.Open(fsys, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return w, st
}

func equalEntries(a, b []raft.Entry) bool {
	return slices.EqualFunc(a, b, func(x, y raft.Entry) bool {
		return x.Term == y.Term && x.Index == y.Index && x.Type == y.Type && bytes.Equal(x.Data, y.Data)
	})
}

func equalState(a, b wal.State) bool {
	return a.Checkpoint == b.Checkpoint && a.HardState == b.HardState && equalEntries(a.Entries, b.Entries)
}

func describe(s wal.State) string {
	var idx []string
	for _, e := range s.Entries {
		idx = append(idx, fmt.Sprintf("%d/%d", e.Index, e.Term))
	}
	return fmt.Sprintf("{cp %+v hs %+v entries [%s]}", s.Checkpoint, s.HardState, strings.Join(idx, " "))
}

// TestRoundTrip writes batches on each file system and reads them back.
func TestRoundTrip(t *testing.T) {
	for name, fsys := range map[string]vfs.FS{"OS": vfs.OS, "MemFS": vfs.NewMemFS()} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "wal")
			if name == "MemFS" {
				dir = "/data/wal"
			}
			w, st := open(t, fsys, dir, opts(1024))
			if !equalState(st, wal.State{}) {
				t.Fatalf("a new WAL recovered %s", describe(st))
			}
			must(t, w.Append(raft.HardState{Term: 1, Vote: 2}, ents(1, 5, 1)))
			must(t, w.Append(raft.HardState{Term: 2, Vote: 3, Commit: 2}, ents(3, 2, 2))) // drops 3..5
			must(t, w.Append(raft.HardState{}, []raft.Entry{{Term: 2, Index: 5, Type: raft.EntryConfChange}}))
			for i := range uint64(40) { // enough to roll segments of 1 KiB
				must(t, w.Append(raft.HardState{Term: 2, Vote: 3, Commit: 5 + i}, ents(6+i, 1, 2)))
			}
			must(t, w.Sync())
			must(t, w.Close())

			want := wal.State{HardState: raft.HardState{Term: 2, Vote: 3, Commit: 44}}
			want.Entries = append(ents(1, 2, 1), ents(3, 2, 2)...)
			want.Entries = append(want.Entries, raft.Entry{Term: 2, Index: 5, Type: raft.EntryConfChange})
			want.Entries = append(want.Entries, ents(6, 40, 2)...)
			w, st = open(t, fsys, dir, opts(1024))
			defer w.Close()
			if !equalState(st, want) {
				t.Fatalf("recovered %s\nwant %s", describe(st), describe(want))
			}
			names, err := fsys.List(dir)
			must(t, err)
			if len(names) < 3 {
				t.Fatalf("segments %q: want several with SegmentBytes 1024", names)
			}
		})
	}
}

func TestCheckpointRemovesOldSegments(t *testing.T) {
	fsys := vfs.NewMemFS()
	w, _ := open(t, fsys, "/wal", opts(wal.MinSegmentBytes))
	for i := range uint64(30) {
		must(t, w.Append(raft.HardState{Term: 1, Commit: i}, ents(1+i, 1, 1)))
	}
	must(t, w.Sync())
	before, _ := fsys.List("/wal")
	cp := wal.Checkpoint{Index: 25, Term: 1, SnapshotChecksum: 0xabcd}
	hs := raft.HardState{Term: 1, Commit: 29}
	must(t, w.Checkpoint(cp, hs, ents(26, 5, 1)))
	after, _ := fsys.List("/wal")
	if len(after) != 1 || after[0] <= before[len(before)-1] {
		t.Fatalf("segments before %q, after %q: want one new segment", before, after)
	}
	must(t, w.Append(raft.HardState{}, ents(31, 1, 1)))
	must(t, w.Close())

	_, st := open(t, fsys, "/wal", opts(0))
	want := wal.State{Checkpoint: cp, HardState: hs, Entries: ents(26, 6, 1)}
	if !equalState(st, want) {
		t.Fatalf("recovered %s\nwant %s", describe(st), describe(want))
	}
}

// TestCheckpointReturnsBeforeRemoval checks that Checkpoint hands the
// removal of the segments it replaced to Options.Background and returns
// without it, and that a crash before the removal runs leaves a log that
// opens to the checkpoint's state, with the leftovers removed; the removal
// running late, after that Open, does no harm.
func TestCheckpointReturnsBeforeRemoval(t *testing.T) {
	for _, torn := range []bool{false, true} {
		fsys := vfs.NewMemFS()
		var removals []func()
		o := opts(wal.MinSegmentBytes)
		o.Background = func(work func()) { removals = append(removals, work) }
		w, _ := open(t, fsys, "/wal", o)
		for i := range uint64(30) {
			must(t, w.Append(raft.HardState{Term: 1, Commit: i}, ents(1+i, 1, 1)))
		}
		must(t, w.Sync())
		before, _ := fsys.List("/wal")
		cp := wal.Checkpoint{Index: 25, Term: 1, SnapshotChecksum: 0xabcd}
		hs := raft.HardState{Term: 1, Commit: 29}
		must(t, w.Checkpoint(cp, hs, ents(26, 5, 1)))
		after, _ := fsys.List("/wal")
		if len(removals) != 1 || len(after) != len(before)+1 {
			t.Fatalf("%d removals handed over; segments before %q, after %q: want one removal, nothing removed yet",
				len(removals), before, after)
		}
		// The process dies before the removal runs.
		if torn {
			fsys.CrashTorn(rand.New(rand.NewPCG(1, 2)))
		} else {
			fsys.Crash()
		}
		w, st := open(t, fsys, "/wal", opts(0))
		want := wal.State{Checkpoint: cp, HardState: hs, Entries: ents(26, 5, 1)}
		if !equalState(st, want) {
			t.Fatalf("torn %v: recovered %s\nwant %s", torn, describe(st), describe(want))
		}
		reopened, _ := fsys.List("/wal")
		if len(reopened) != 1 || reopened[0] != after[len(after)-1] {
			t.Fatalf("torn %v: segments after the reopen %q: want only the checkpoint's, %s", torn, reopened, after[len(after)-1])
		}
		removals[0]() // late: the files are gone already
		must(t, w.Append(raft.HardState{}, ents(31, 1, 1)))
		must(t, w.Sync())
		must(t, w.Close())
		_, st = open(t, fsys, "/wal", opts(0))
		if want.Entries = ents(26, 6, 1); !equalState(st, want) {
			t.Fatalf("torn %v: after the late removal recovered %s\nwant %s", torn, describe(st), describe(want))
		}
	}
}

// TestCheckpointRemovesInBackground checks the default Options.Background:
// the replaced segments are removed on a goroutine of their own, and Close
// waits for it (run with -race: the removal shares the file system with
// the appends that follow the checkpoint).
func TestCheckpointRemovesInBackground(t *testing.T) {
	fsys := vfs.NewMemFS()
	w, _ := open(t, fsys, "/wal", wal.Options{SegmentBytes: wal.MinSegmentBytes, Logger: quiet})
	index := uint64(0)
	for round := range uint64(3) {
		for range 30 {
			index++
			must(t, w.Append(raft.HardState{Term: 1, Commit: index - 1}, ents(index, 1, 1)))
		}
		must(t, w.Sync())
		must(t, w.Checkpoint(wal.Checkpoint{Index: index - 5, Term: 1, SnapshotChecksum: uint32(round)},
			raft.HardState{Term: 1, Commit: index}, ents(index-4, 5, 1)))
	}
	must(t, w.Close())
	names, _ := fsys.List("/wal")
	if len(names) != 1 {
		t.Fatalf("segments after Close %q: want only the last checkpoint's", names)
	}
}

func TestCheckpointDropsLog(t *testing.T) {
	// A checkpoint past the last index (an installed snapshot) keeps nothing.
	fsys := vfs.NewMemFS()
	w, _ := open(t, fsys, "/wal", opts(0))
	must(t, w.Append(raft.HardState{Term: 1}, ents(1, 3, 1)))
	cp := wal.Checkpoint{Index: 100, Term: 4}
	must(t, w.Checkpoint(cp, raft.HardState{Term: 4, Commit: 100}, nil))
	must(t, w.Append(raft.HardState{}, ents(101, 1, 4)))
	must(t, w.Sync())
	_, st := open(t, fsys, "/wal", opts(0))
	want := wal.State{Checkpoint: cp, HardState: raft.HardState{Term: 4, Commit: 100}, Entries: ents(101, 1, 4)}
	if !equalState(st, want) {
		t.Fatalf("recovered %s\nwant %s", describe(st), describe(want))
	}
}

func TestUnsyncedBatchLostSyncedKept(t *testing.T) {
	fsys := vfs.NewMemFS()
	w, _ := open(t, fsys, "/wal", opts(0))
	must(t, w.Append(raft.HardState{Term: 1}, ents(1, 2, 1)))
	must(t, w.Sync())
	must(t, w.Append(raft.HardState{Term: 2}, ents(3, 2, 2)))
	fsys.Crash()
	_, st := open(t, fsys, "/wal", opts(0))
	want := wal.State{HardState: raft.HardState{Term: 1}, Entries: ents(1, 2, 1)}
	if !equalState(st, want) {
		t.Fatalf("recovered %s\nwant %s", describe(st), describe(want))
	}
}

// TestTornTailTruncatedAndLogged appends garbage-free torn bytes to the last
// segment and checks that Open truncates them, logs it, and appends after.
func TestTornTailTruncatedAndLogged(t *testing.T) {
	fsys := vfs.NewMemFS()
	w, _ := open(t, fsys, "/wal", wal.Options{PreallocateBytes: -1, Logger: quiet})
	must(t, w.Append(raft.HardState{Term: 1}, ents(1, 2, 1)))
	must(t, w.Close())
	name := "/wal/0000000000000001.wal"
	clean, err := vfs.ReadFile(fsys, name)
	must(t, err)
	f, err := fsys.OpenAppend(name)
	must(t, err)
	// The start of a record header, then zeros: a size that reached the
	// disk before all its data. (Zeros alone are the end of the log.)
	_, err = f.Write(append([]byte{42, 0, 0, 0, 1}, make([]byte, 45)...))
	must(t, err)
	must(t, f.Close())

	var logged bytes.Buffer
	// Without preallocation, so that the bytes written land right after
	// the batch (TestPreallocated* cover the zero tail).
	w, st, err := wal.Open(fsys, "/wal", wal.Options{PreallocateBytes: -1, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	must(t, err)
	if !strings.Contains(logged.String(), "truncating torn tail") {
		t.Fatalf("log does not mention the torn tail: %q", logged.String())
	}
	if got, _ := vfs.ReadFile(fsys, name); !bytes.Equal(got, clean) {
		t.Fatalf("segment is %d bytes after recovery, want the %d clean bytes", len(got), len(clean))
	}
	if len(st.Entries) != 2 {
		t.Fatalf("recovered %s", describe(st))
	}
	must(t, w.Append(raft.HardState{}, ents(3, 1, 1)))
	must(t, w.Close())
	_, st = open(t, fsys, "/wal", opts(0))
	if !equalEntries(st.Entries, ents(1, 3, 1)) {
		t.Fatalf("after appending past the truncated tail recovered %s", describe(st))
	}
}

// corruptWAL builds a WAL of several segments and returns its segment names.
func corruptWAL(t *testing.T) (*vfs.MemFS, []string) {
	fsys := vfs.NewMemFS()
	w, _ := open(t, fsys, "/wal", opts(wal.MinSegmentBytes))
	for i := range uint64(20) {
		must(t, w.Append(raft.HardState{Term: 1, Commit: i}, ents(1+i, 1, 1)))
	}
	must(t, w.Close())
	names, err := fsys.List("/wal")
	must(t, err)
	if len(names) < 3 {
		t.Fatalf("want at least 3 segments, got %q", names)
	}
	return fsys, names
}

func rewrite(t *testing.T, fsys vfs.FS, name string, change func([]byte) []byte) {
	t.Helper()
	data, err := vfs.ReadFile(fsys, name)
	must(t, err)
	f, err := fsys.Create(name)
	must(t, err)
	_, err = f.Write(change(data))
	must(t, err)
	must(t, f.Sync())
	must(t, f.Close())
}

func TestCorruption(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, fsys vfs.FS, names []string)
		want   error
		text   string
	}{
		{"bad record in an earlier segment", func(t *testing.T, fsys vfs.FS, names []string) {
			rewrite(t, fsys, "/wal/"+names[0], func(b []byte) []byte { b[len(b)-3] ^= 1; return b })
		}, wal.ErrCorrupt, "not the last"},
		{"bad record followed by valid ones in the last segment", func(t *testing.T, fsys vfs.FS, names []string) {
			rewrite(t, fsys, "/wal/"+names[len(names)-1], func(b []byte) []byte { b[40] ^= 1; return b })
		}, wal.ErrCorrupt, "a valid record follows"},
		{"earlier segment cut short", func(t *testing.T, fsys vfs.FS, names []string) {
			rewrite(t, fsys, "/wal/"+names[1], func(b []byte) []byte { return b[:len(b)-10] })
		}, wal.ErrCorrupt, "segment 0000000000000002.wal"},
		{"missing middle segment", func(t *testing.T, fsys vfs.FS, names []string) {
			must(t, fsys.Remove("/wal/"+names[1]))
		}, wal.ErrCorrupt, "0000000000000002.wal is missing"},
		{"missing first segment", func(t *testing.T, fsys vfs.FS, names []string) {
			must(t, fsys.Remove("/wal/"+names[0]))
		}, wal.ErrCorrupt, "missing"},
		{"bad magic", func(t *testing.T, fsys vfs.FS, names []string) {
			rewrite(t, fsys, "/wal/"+names[0], func(b []byte) []byte { copy(b, "PNG\r\n\x1a\n\x00"); return b })
		}, wal.ErrCorrupt, "bad magic"},
		{"newer version", func(t *testing.T, fsys vfs.FS, names []string) {
			rewrite(t, fsys, "/wal/"+names[0], func(b []byte) []byte { b[8] = 9; return b })
		}, wal.ErrUnsupported, "version 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys, names := corruptWAL(t)
			tt.damage(t, fsys, names)
			_, _, err := wal.Open(fsys, "/wal", opts(0))
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("got %v, want %v mentioning %q", err, tt.want, tt.text)
			}
		})
	}
}

func TestFailedSyncMakesWALUnusable(t *testing.T) {
	mem := vfs.NewMemFS()
	fsys := vfs.NewFaultFS(mem, 1, nil)
	w, _ := open(t, fsys, "/wal", opts(0))
	must(t, w.Append(raft.HardState{Term: 1}, ents(1, 1, 1)))
	must(t, w.Sync())
	fsys.SetInjector(vfs.FailNth(1, vfs.FaultError, vfs.OpSync))
	must(t, w.Append(raft.HardState{Term: 1}, ents(2, 1, 1)))
	err := w.Sync()
	if !errors.Is(err, wal.ErrFailed) || !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("Sync: %v, want ErrFailed wrapping ErrInjected", err)
	}
	if err := w.Append(raft.HardState{}, ents(3, 1, 1)); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("Append after a failed Sync: %v, want ErrFailed", err)
	}
	_ = w.Close()
	mem.Crash()
	_, st := open(t, mem, "/wal", opts(0))
	if len(st.Entries) != 1 {
		t.Fatalf("recovered %s, want the synced entry only", describe(st))
	}
}

func TestShortWriteMakesWALUnusable(t *testing.T) {
	mem := vfs.NewMemFS()
	fsys := vfs.NewFaultFS(mem, 2, nil)
	w, _ := open(t, fsys, "/wal", opts(0))
	fsys.SetInjector(vfs.FailNth(1, vfs.FaultShortWrite, vfs.OpWrite))
	// Entries only: the batch's last byte is not zero, so the allocated
	// zeros after a short write cannot complete it (had the bytes not
	// written been zeros, the batch recovered would be the one written).
	if err := w.Append(raft.HardState{}, ents(1, 3, 1)); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("Append with a short write: %v, want ErrFailed", err)
	}
	_ = w.Close()
	// Without a crash the short write is in the file: a torn tail.
	_, st := open(t, mem, "/wal", opts(0))
	if len(st.Entries) != 0 {
		t.Fatalf("recovered %s from a short write", describe(st))
	}
}

func TestErrors(t *testing.T) {
	fsys := vfs.NewMemFS()
	if _, _, err := wal.Open(fsys, "/wal", wal.Options{SegmentBytes: 10}); err == nil || !strings.Contains(err.Error(), "SegmentBytes") {
		t.Fatalf("Open with SegmentBytes 10: %v, want an error naming the field", err)
	}
	w, _ := open(t, fsys, "/wal", opts(0))
	big := []raft.Entry{{Term: 1, Index: 1, Data: make([]byte, wal.MaxRecordBytes)}}
	if err := w.Append(raft.HardState{}, big); !errors.Is(err, wal.ErrTooLarge) {
		t.Fatalf("Append of a too large entry: %v, want ErrTooLarge", err)
	}
	must(t, w.Append(raft.HardState{}, ents(1, 1, 1))) // still usable
	must(t, w.Close())
	must(t, w.Close())
	if err := w.Append(raft.HardState{}, ents(2, 1, 1)); !errors.Is(err, wal.ErrClosed) {
		t.Fatalf("Append after Close: %v, want ErrClosed", err)
	}
	if err := w.Sync(); !errors.Is(err, wal.ErrClosed) {
		t.Fatalf("Sync after Close: %v, want ErrClosed", err)
	}
}

func TestAppendGapPanics(t *testing.T) {
	w, _ := open(t, vfs.NewMemFS(), "/wal", opts(0))
	defer func() {
		if _, ok := recover().(assert.Failure); !ok {
			t.Fatal("Append with a gap did not panic with an assertion failure")
		}
	}()
	_ = w.Append(raft.HardState{}, ents(5, 1, 1))
}

// op is one step of a crash-test workload; each Append or Checkpoint is a
// batch.
type op struct {
	sync       bool
	checkpoint *wal.Checkpoint
	hs         raft.HardState
	ents       []raft.Entry
}

// workload generates a seeded sequence of appends (some truncating), syncs
// and checkpoints.
func workload(seed uint64, n int) []op {
	rng := rand.New(rand.NewPCG(seed, 3))
	var ops []op
	var cpIndex, last, term uint64 = 0, 0, 1
	for range n {
		switch r := rng.IntN(10); {
		case r < 2:
			ops = append(ops, op{sync: true})
		case r < 3 && last > cpIndex:
			idx := cpIndex + 1 + rng.Uint64N(last-cpIndex)
			cp := &wal.Checkpoint{Index: idx, Term: term, SnapshotChecksum: rng.Uint32()}
			ops = append(ops, op{checkpoint: cp, hs: raft.HardState{Term: term, Commit: idx}, ents: nil})
			cpIndex = idx
			last = max(last, idx)
			// The entries after idx are filled in by the runner from its model.
		default:
			first := last + 1
			if last > cpIndex && rng.IntN(3) == 0 {
				first = cpIndex + 1 + rng.Uint64N(last-cpIndex) // a conflicting suffix
				term++
			}
			k := uint64(rng.IntN(4))
			var batch []raft.Entry
			for i := range k {
				data := make([]byte, rng.IntN(60))
				for j := range data {
					data[j] = byte(rng.IntN(256))
				}
				batch = append(batch, raft.Entry{Term: term, Index: first + i, Data: data})
			}
			hs := raft.HardState{}
			if rng.IntN(3) > 0 {
				hs = raft.HardState{Term: term, Vote: rng.Uint64N(5), Commit: cpIndex}
			}
			ops = append(ops, op{hs: hs, ents: batch})
			if k > 0 {
				last = first + k - 1
			}
		}
	}
	return ops
}

// apply applies a batch to a model state.
func apply(s wal.State, o op) wal.State {
	s.Entries = slices.Clone(s.Entries)
	if o.checkpoint != nil {
		s.Checkpoint = *o.checkpoint
		s.Entries = o.ents
	} else if len(o.ents) > 0 {
		s.Entries = append(s.Entries[:o.ents[0].Index-s.Checkpoint.Index-1], o.ents...)
	}
	if !o.hs.IsEmpty() {
		s.HardState = o.hs
	}
	return s
}

// run runs ops until the first error, returning the model states after each
// batch (states[0] is the initial one), how many batches are durable
// (acknowledged), and how many were attempted.
func run(w *wal.WAL, ops []op) (states []wal.State, acked, attempted int) {
	states = []wal.State{{}}
	cur := wal.State{}
	for _, o := range ops {
		var err error
		switch {
		case o.sync:
			if err = w.Sync(); err == nil {
				acked = attempted
			}
		case o.checkpoint != nil:
			if o.checkpoint.Index < cur.LastIndex() {
				o.ents = slices.Clone(cur.Entries[o.checkpoint.Index-cur.Checkpoint.Index:])
			}
			attempted++
			err = w.Checkpoint(*o.checkpoint, o.hs, o.ents)
			if err == nil {
				acked = attempted
			}
		default:
			if len(o.ents) == 0 && o.hs.IsEmpty() {
				continue
			}
			attempted++
			err = w.Append(o.hs, o.ents)
		}
		if o.checkpoint != nil || !o.sync {
			cur = apply(cur, o)
			states = append(states, cur)
		}
		if err != nil {
			return states, acked, attempted
		}
	}
	return states, acked, attempted
}

// TestCrashAtEveryStep runs a workload, measures its file system operations,
// then for every one of them crashes there (strictly, and torn with two
// seeds), recovers, and checks that the recovered state is the state after
// some batch between the last acknowledged and the last attempted one. It
// then checks that the recovered WAL takes new batches.
func TestCrashAtEveryStep(t *testing.T) { crashAtEveryStep(t, opts(wal.MinSegmentBytes)) }

// TestCrashAtEveryStepAllocatingInSteps is TestCrashAtEveryStep with
// segments that get their space in several steps: crashes in the middle of
// an allocation, of the writes into it, and of a roll.
func TestCrashAtEveryStepAllocatingInSteps(t *testing.T) {
	o := opts(2048)
	o.PreallocateBytes = wal.MinSegmentBytes
	crashAtEveryStep(t, o)
}

func crashAtEveryStep(t *testing.T, o wal.Options) {
	for seed := range uint64(3) {
		ops := workload(seed, 40)
		dry := vfs.NewMemFS()
		w, _ := open(t, dry, "/wal", o)
		base := dry.Ops()
		states, _, attempted := run(w, ops)
		total := dry.Ops() - base
		if attempted < 20 || total < 50 {
			t.Fatalf("seed %d: workload too small: %d batches, %d operations", seed, attempted, total)
		}
		for point := 1; point <= total; point++ {
			for mode := range 3 {
				checkCrash(t, o, ops, states, seed, point, mode)
			}
		}
	}
}

func checkCrash(t *testing.T, o wal.Options, ops []op, model []wal.State, seed uint64, point, mode int) {
	t.Helper()
	fsys := vfs.NewMemFS()
	w, _ := open(t, fsys, "/wal", o)
	fsys.SetCrashPoint(point)
	_, acked, attempted := run(w, ops)
	if !fsys.Crashed() {
		t.Fatalf("seed %d point %d: the workload ended before the crash point", seed, point)
	}
	if mode == 0 {
		fsys.Crash()
	} else {
		fsys.CrashTorn(rand.New(rand.NewPCG(seed, uint64(point*3+mode))))
	}
	w, st, err := wal.Open(fsys, "/wal", o)
	if err != nil {
		t.Fatalf("seed %d point %d mode %d: recovery failed: %v", seed, point, mode, err)
	}
	found := -1
	for i := acked; i <= attempted; i++ {
		if equalState(st, model[i]) {
			found = i
		}
	}
	if found < 0 {
		t.Fatalf("seed %d point %d mode %d: recovered %s\nwhich is no state between batch %d (acknowledged) and %d (attempted);\nacknowledged: %s",
			seed, point, mode, describe(st), acked, attempted, describe(model[acked]))
	}
	// The recovered WAL takes a new batch, which survives a strict crash.
	next := ents(st.LastIndex()+1, 2, st.HardState.Term+1)
	must(t, w.Append(raft.HardState{Term: st.HardState.Term + 1}, next))
	must(t, w.Sync())
	fsys.Crash()
	_, again := open(t, fsys, "/wal", o)
	want := apply(st, op{hs: raft.HardState{Term: st.HardState.Term + 1}, ents: next})
	if !equalState(again, want) {
		t.Fatalf("seed %d point %d mode %d: after a new batch recovered %s\nwant %s", seed, point, mode, describe(again), describe(want))
	}
}

// TestOpenReadsEachSegmentOnce: Open reads a segment at most once, though
// it looks at the last two for an interrupted roll before the replay.
func TestOpenReadsEachSegmentOnce(t *testing.T) {
	m := vfs.NewMemFS()
	w, _ := open(t, m, "/wal", opts(wal.MinSegmentBytes))
	for i := range uint64(30) {
		must(t, w.Append(raft.HardState{Term: 1, Commit: i}, ents(1+i, 1, 1)))
	}
	must(t, w.Sync())
	must(t, w.Close())
	names, err := m.List("/wal")
	must(t, err)
	if len(names) < 3 {
		t.Fatalf("segments %q: want several", names)
	}
	opened := map[string]int{}
	f := vfs.NewFaultFS(m, 1, func(op vfs.Op) vfs.Fault {
		if op.Kind == vfs.OpOpen {
			opened[filepath.Base(op.Name)]++
		}
		return vfs.NoFault
	})
	w, st := open(t, f, "/wal", opts(wal.MinSegmentBytes))
	defer w.Close()
	if st.LastIndex() != 30 {
		t.Fatalf("recovered last index %d, want 30", st.LastIndex())
	}
	for name, n := range opened {
		if n > 1 {
			t.Errorf("Open read %s %d times (reads: %v), want once", name, n, opened)
		}
	}
}

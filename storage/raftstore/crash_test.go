package raftstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/snapshot"
	"coord/storage/vfs"
)

// The crash tests run a seeded workload of Save, Compact and ApplySnapshot
// calls against a model, crash the file system at a chosen point, reopen,
// and check that the recovered state is the model's state after some call
// between the last acknowledged one and the last attempted one: nothing
// acknowledged is lost (hard state included, so it never goes backwards),
// nothing unacknowledged is half-applied, and recovery never fails. One
// exception, by design: the term and vote go to the VOTE file before the
// log, so they may be those of a later attempted call (a term and vote
// persisted early are safe: a node may always move to a newer term, and
// that vote was never promised to anyone else), and so may the commit
// index the VOTE file holds beside them (a commit index is a fact learnt
// from a leader, about entries the log holds).

type opKind int

const (
	opSave opKind = iota
	opCompact
	opApplySnapshot
)

type op struct {
	kind opKind
	hs   raft.HardState
	ents []raft.Entry
	snap raft.Snapshot // Compact uses its index, data and membership
}

func (o op) String() string {
	switch o.kind {
	case opCompact:
		return fmt.Sprintf("Compact(%d)", o.snap.Metadata.Index)
	case opApplySnapshot:
		return fmt.Sprintf("ApplySnapshot(%d/%d)", o.snap.Metadata.Index, o.snap.Metadata.Term)
	}
	var idx []string
	for _, e := range o.ents {
		idx = append(idx, fmt.Sprintf("%d/%d", e.Index, e.Term))
	}
	return fmt.Sprintf("Save(%+v, [%s])", o.hs, strings.Join(idx, " "))
}

// state is the model of a Disk.
type state struct {
	hs   raft.HardState
	snap raft.Snapshot
	ents []raft.Entry // after snap's index
}

func (s state) last() uint64 { return s.snap.Metadata.Index + uint64(len(s.ents)) }

func (s state) String() string {
	var idx []string
	for _, e := range s.ents {
		idx = append(idx, fmt.Sprintf("%d/%d", e.Index, e.Term))
	}
	return fmt.Sprintf("{hs %+v snapshot %d/%d %q entries [%s]}", s.hs, s.snap.Metadata.Index, s.snap.Metadata.Term,
		s.snap.Data, strings.Join(idx, " "))
}

// apply is the model's version of each call.
func (s state) apply(o op) state {
	s.ents = slices.Clone(s.ents)
	switch o.kind {
	case opSave:
		if !o.hs.IsEmpty() {
			s.hs = o.hs
		}
		for _, e := range o.ents {
			if e.Index > s.snap.Metadata.Index {
				s.ents = append(s.ents[:e.Index-s.snap.Metadata.Index-1], e)
			}
		}
	case opCompact:
		pos := o.snap.Metadata.Index - s.snap.Metadata.Index
		s.snap = o.snap
		s.snap.Metadata.Term = s.ents[pos-1].Term
		s.ents = s.ents[pos:]
	case opApplySnapshot:
		s.snap, s.ents = o.snap, nil
		s.hs.Commit = max(s.hs.Commit, o.snap.Metadata.Index)
	}
	return s
}

// workload returns n seeded calls and the model's states: states[i] is the
// state after the first i calls. With elections, one call in twelve is a
// Save of a new term and vote alone (a candidate's or a voter's), which
// the VOTE file makes durable without a sync of the log.
func workload(seed uint64, n int, elections bool) ([]op, []state) {
	rng := rand.New(rand.NewPCG(seed, 17))
	states := []state{{}}
	var ops []op
	term, vote := uint64(1), uint64(0)
	for len(ops) < n {
		s := states[len(states)-1]
		snapIndex := s.snap.Metadata.Index
		var o op
		switch r := rng.IntN(12); {
		case r == 0:
			term++
			o = op{kind: opApplySnapshot, snap: raft.Snapshot{
				Metadata: raft.SnapshotMetadata{Index: s.last() + 1 + rng.Uint64N(3), Term: term,
					ConfState: raft.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{uint64(len(ops))}}},
				Data: []byte(fmt.Sprintf("installed at call %d", len(ops))),
			}}
		case r == 3 && elections:
			// An election: a new term and a vote, no entries (a
			// candidate's or a voter's Save).
			term, vote = term+1, 1+rng.Uint64N(3)
			commit := max(s.hs.Commit, snapIndex)
			if s.last() > commit && rng.IntN(2) == 0 {
				commit += 1 + rng.Uint64N(s.last()-commit) // learnt with the new term
			}
			o.hs = raft.HardState{Term: term, Vote: vote, Commit: commit}
		case r <= 2 && s.last() > snapIndex:
			o = op{kind: opCompact, snap: raft.Snapshot{
				Metadata: raft.SnapshotMetadata{Index: snapIndex + 1 + rng.Uint64N(s.last()-snapIndex),
					ConfState: raft.ConfState{Voters: []uint64{uint64(len(ops))}}},
				Data: []byte(fmt.Sprintf("compacted at call %d", len(ops))),
			}}
		default:
			first := s.last() + 1
			if s.last() > snapIndex && rng.IntN(4) == 0 {
				first = snapIndex + 1 + rng.Uint64N(s.last()-snapIndex) // a conflicting suffix
				term, vote = term+1, 0
			}
			for i := range uint64(rng.IntN(4)) {
				data := make([]byte, rng.IntN(80))
				for j := range data {
					data[j] = byte(rng.IntN(256))
				}
				o.ents = append(o.ents, raft.Entry{Term: term, Index: first + i, Data: data})
			}
			if rng.IntN(3) > 0 {
				if vote == 0 {
					vote = rng.Uint64N(4)
				}
				o.hs = raft.HardState{Term: term, Vote: vote, Commit: max(s.hs.Commit, snapIndex)}
			}
		}
		ops = append(ops, o)
		states = append(states, s.apply(o))
	}
	return ops, states
}

// run makes the calls until the first error and returns how many were
// acknowledged (returned nil) and attempted.
func run(d *raftstore.Disk, ops []op) (acked, attempted int, err error) {
	for _, o := range ops {
		attempted++
		switch o.kind {
		case opSave:
			err = d.Save(o.hs, o.ents, true)
		case opCompact:
			err = d.Compact(o.snap.Metadata.Index, o.snap.Data, o.snap.Metadata.ConfState)
		case opApplySnapshot:
			err = d.ApplySnapshot(o.snap)
		}
		if err != nil {
			return acked, attempted, err
		}
		acked = attempted
	}
	return acked, attempted, nil
}

// read returns the state a Disk shows.
func read(t *testing.T, d *raftstore.Disk) state {
	t.Helper()
	st, err := readChecked(t, d)
	must(t, err)
	return st
}

// readChecked is read, with the snapshot's data read from its Source (Open
// reads only its header): a damaged file is the error returned.
func readChecked(t *testing.T, d *raftstore.Disk) (state, error) {
	t.Helper()
	hs, cs, err := d.InitialState()
	must(t, err)
	snap, err := d.Snapshot()
	must(t, err)
	if snap.Source != nil {
		r, err := snap.Open()
		if err != nil {
			return state{}, err
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return state{}, err
		}
		snap.Source, snap.Data = nil, data
		if len(data) == 0 {
			snap.Data = nil
		}
	}
	if !cs.Equal(snap.Metadata.ConfState) {
		t.Fatalf("InitialState's ConfState %+v differs from the snapshot's %+v", cs, snap.Metadata.ConfState)
	}
	first, err := d.FirstIndex()
	must(t, err)
	last, err := d.LastIndex()
	must(t, err)
	if first != snap.Metadata.Index+1 {
		t.Fatalf("FirstIndex %d with a snapshot at %d", first, snap.Metadata.Index)
	}
	ents, err := d.Entries(first, last+1, 0)
	must(t, err)
	return state{hs: hs, snap: snap, ents: ents}, nil
}

func sameState(a, b state) bool {
	return a.hs == b.hs && a.snap.Metadata.Index == b.snap.Metadata.Index && a.snap.Metadata.Term == b.snap.Metadata.Term &&
		a.snap.Metadata.ConfState.Equal(b.snap.Metadata.ConfState) && bytes.Equal(a.snap.Data, b.snap.Data) &&
		slices.EqualFunc(a.ents, b.ents, func(x, y raft.Entry) bool {
			return x.Term == y.Term && x.Index == y.Index && x.Type == y.Type && bytes.Equal(x.Data, y.Data)
		})
}

// checkRecovered fails unless got is one of states[lo..hi], but for a term
// and vote, and with them a commit index, that may be those of a later
// state up to hi (the VOTE file holds all three, and is written first).
func checkRecovered(t *testing.T, got state, states []state, lo, hi int, context string) {
	t.Helper()
	for i := lo; i <= hi; i++ {
		for j := i; j <= hi; j++ {
			want := states[i]
			want.hs.Term, want.hs.Vote = states[j].hs.Term, states[j].hs.Vote
			if sameState(got, want) {
				return
			}
			want.hs.Commit = states[j].hs.Commit
			if sameState(got, want) {
				return
			}
		}
	}
	t.Fatalf("%s: recovered %v\nwhich is no state between call %d (acknowledged) and %d (attempted)\nacknowledged state: %v",
		context, got, lo, hi, states[lo])
}

// crash makes a crash: mode 0 loses all that was not synced, other modes
// keep a seeded torn part of it.
func crash(m *vfs.MemFS, mode int, seed uint64) {
	if mode == 0 {
		m.Crash()
		return
	}
	m.CrashTorn(rand.New(rand.NewPCG(seed, uint64(mode))))
}

// TestCrashAtEveryStep crashes at every file system operation of seeded
// workloads, in three ways each (strict, and torn with two seeds), and, for
// the torn ones, crashes again at a seeded point during the recovery.
func TestCrashAtEveryStep(t *testing.T) {
	points := 0
	kinds := map[opKind]int{}
	for seed := range uint64(6) {
		ops, states := workload(seed, 30, seed >= 4)
		dry := vfs.NewMemFS()
		d := open(t, dry, "/node")
		base := dry.Ops()
		if _, _, err := run(d, ops); err != nil {
			t.Fatal(err)
		}
		total := dry.Ops() - base
		for _, o := range ops {
			kinds[o.kind]++
		}
		for point := 1; point <= total; point++ {
			for mode := range 3 {
				crashAt(t, ops, states, seed, point, mode)
				points++
			}
		}
	}
	if kinds[opCompact] == 0 || kinds[opApplySnapshot] == 0 {
		t.Fatalf("workloads without snapshots: %v calls of each kind", kinds)
	}
	t.Logf("%d crash points checked; calls by kind (save, compact, apply snapshot): %v", points, kinds)
}

func crashAt(t *testing.T, ops []op, states []state, seed uint64, point, mode int) {
	t.Helper()
	context := fmt.Sprintf("seed %d point %d mode %d", seed, point, mode)
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	m.SetCrashPoint(point)
	acked, attempted, err := run(d, ops)
	// A crash while removing files a checkpoint replaced is not an error:
	// the call is durable, and the next Open removes them.
	if !m.Crashed() || (err != nil && !errors.Is(err, vfs.ErrCrashed)) {
		t.Fatalf("%s: the workload ended with %v, want a crash", context, err)
	}
	crash(m, mode, seed*1000+uint64(point))
	if mode > 0 {
		// Crash again during recovery.
		m.SetCrashPoint(1 + int(seed+uint64(point))%6)
		if d, err := raftstore.Open(m, "/node", opts); err == nil {
			_ = d // abandoned: the crash below is its end
		} else if !errors.Is(err, vfs.ErrCrashed) {
			t.Fatalf("%s: recovery failed: %v", context, err)
		}
		crash(m, mode, seed*1000+uint64(point)+1)
	}
	d, err = raftstore.Open(m, "/node", opts)
	if err != nil {
		t.Fatalf("%s: recovery failed (after %v): %v", context, ops[attempted-1], err)
	}
	got := read(t, d)
	checkRecovered(t, got, states, acked, attempted, context+" after "+ops[attempted-1].String())

	// The recovered Disk works: a new call is acknowledged and survives.
	next := op{hs: raft.HardState{Term: got.hs.Term + 1, Commit: got.hs.Commit},
		ents: []raft.Entry{{Term: got.hs.Term + 1, Index: got.last() + 1, Data: []byte("after recovery")}}}
	must(t, d.Save(next.hs, next.ents, true))
	m.Crash()
	d = open(t, m, "/node")
	if want := got.apply(next); !sameState(read(t, d), want) {
		t.Fatalf("%s: after recovery and a new Save, recovered %v\nwant %v", context, read(t, d), want)
	}
	checkFiles(t, m, context)
}

// checkFiles checks that recovery left no garbage: one snapshot file at
// most, no tmp files.
func checkFiles(t *testing.T, m *vfs.MemFS, context string) {
	t.Helper()
	files, tmps, err := snapshot.List(m, "/node/snap")
	must(t, err)
	if len(files) > 1 || len(tmps) > 0 {
		t.Fatalf("%s: snapshot directory holds %+v and %q after recovery", context, files, tmps)
	}
}

// TestInjectedFaults runs seeded workloads on a file system that fails
// writes, syncs, renames and directory syncs at random (errors and short
// writes), then reopens, with or without a crash, and checks the recovered
// state as the crash test does.
func TestInjectedFaults(t *testing.T) {
	kinds := []vfs.OpKind{vfs.OpCreate, vfs.OpWrite, vfs.OpSync, vfs.OpRename, vfs.OpSyncDir, vfs.OpRemove, vfs.OpTruncate, vfs.OpAllocate}
	failures := 0
	injected := map[vfs.OpKind]int{}
	for seed := range uint64(60) {
		ops, states := workload(seed, 40, seed%4 == 3)
		m := vfs.NewMemFS()
		fault := vfs.FaultError
		if seed%2 == 1 {
			fault = vfs.FaultShortWrite
		}
		inject := vfs.Probabilistic(seed, 0.03, fault, kinds...)
		f := vfs.NewFaultFS(m, seed, func(op vfs.Op) vfs.Fault {
			got := inject(op)
			if got != vfs.NoFault {
				injected[op.Kind]++
			}
			return got
		})
		d, err := raftstore.Open(f, "/node", opts)
		if err != nil {
			continue // a fault during the first Open: nothing to check
		}
		acked, attempted, err := run(d, ops)
		if err == nil {
			continue
		}
		failures++
		if !errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("seed %d: failed with %v, want an injected fault", seed, err)
		}
		context := fmt.Sprintf("seed %d (%v)", seed, err)
		if seed%5 != 0 { // else no crash: the process restarts, the page cache survives
			crash(m, int(seed%3), seed) // mode 0 is a strict crash; others torn
		} else {
			m.ReleaseLocks()
		}
		d, err = raftstore.Open(m, "/node", opts)
		if err != nil {
			t.Fatalf("%s: recovery failed: %v", context, err)
		}
		checkRecovered(t, read(t, d), states, acked, attempted, context)
		checkFiles(t, m, context)
	}
	if failures < 20 {
		t.Fatalf("only %d of 60 workloads met a fault: raise the probability", failures)
	}
	for _, kind := range kinds {
		// Truncate is only Repair's and a torn tail's at Open: the
		// workload's calls never reach it.
		if kind != vfs.OpTruncate && injected[kind] == 0 {
			t.Errorf("no %s fault was injected in 60 workloads (faults by kind: %v)", kind, injected)
		}
	}
	t.Logf("faults injected, by kind: %v", injected)
}

// TestRestartWithoutCrash reopens after a failed write without a crash: what
// reached the page cache may be recovered, and that is allowed.
func TestRestartWithoutCrash(t *testing.T) {
	for seed := range uint64(20) {
		ops, states := workload(seed, 40, seed%2 == 1)
		m := vfs.NewMemFS()
		f := vfs.NewFaultFS(m, seed, vfs.Probabilistic(seed, 0.05, vfs.FaultError, vfs.OpSync, vfs.OpSyncDir))
		d, err := raftstore.Open(f, "/node", opts)
		if err != nil {
			continue
		}
		acked, attempted, err := run(d, ops)
		if err == nil {
			continue
		}
		m.ReleaseLocks() // the process died; the machine did not
		d, err = raftstore.Open(m, "/node", opts)
		if err != nil {
			t.Fatalf("seed %d: reopen failed: %v", seed, err)
		}
		checkRecovered(t, read(t, d), states, acked, attempted, fmt.Sprintf("seed %d", seed))
	}
}

// TestBitFlips flips one bit in something written; a later Open either
// reports the damage (ErrCorrupt) or recovers a state the workload went
// through: a flip never yields data that was not written.
func TestBitFlips(t *testing.T) {
	detected := 0
	for seed := range uint64(40) {
		ops, states := workload(seed, 30, false)
		m := vfs.NewMemFS()
		nth := 1 + int(seed*7)%40
		f := vfs.NewFaultFS(m, seed, vfs.FailNth(nth, vfs.FaultBitFlip, vfs.OpWrite))
		d, err := raftstore.Open(f, "/node", opts)
		must(t, err)
		_, attempted, err := run(d, ops)
		if err != nil {
			t.Fatalf("seed %d: a silent bit flip made a call fail: %v", seed, err)
		}
		must(t, d.Close())
		d, err = raftstore.Open(m, "/node", opts)
		if err != nil {
			if !errors.Is(err, raftstore.ErrCorrupt) {
				t.Fatalf("seed %d: Open after a bit flip: %v, want ErrCorrupt", seed, err)
			}
			detected++
			continue
		}
		// A flip in a snapshot's data shows when the data is read
		// (Open reads only its header): the node's restore fails.
		got, err := readChecked(t, d)
		if err != nil {
			if !errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("seed %d: reading the snapshot after a bit flip: %v, want ErrCorrupt", seed, err)
			}
			detected++
			continue
		}
		checkRecovered(t, got, states, 0, attempted, fmt.Sprintf("seed %d", seed))
	}
	if detected == 0 {
		t.Fatal("no bit flip was detected at Open or in the snapshot's data")
	}
}

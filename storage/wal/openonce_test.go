package wal

import (
	"path/filepath"
	"testing"

	"coord/raft"
	"coord/storage/vfs"
)

// TestOpenReadsACompletedRollOnce: a roll that completed (the segment
// before ends by naming the next) and then stopped before the next
// segment's first batch (a crash, or a write that failed) leaves an empty
// last segment. Open looks at the last two segments for an interrupted
// roll, parsing the segment before as if it were the last, then replays it
// as an earlier one: it must still read it only once.
func TestOpenReadsACompletedRollOnce(t *testing.T) {
	m := vfs.NewMemFS()
	o := Options{SegmentBytes: MinSegmentBytes, Logger: preallocQuiet, Background: func(work func()) { work() }}
	w, _, err := Open(m, "/wal", o)
	mustDo(t, err)
	for i := range uint64(5) {
		mustDo(t, w.Append(raft.HardState{Term: 1, Commit: i}, []raft.Entry{{Term: 1, Index: 1 + i, Data: []byte("e")}}))
	}
	mustDo(t, w.Sync())
	mustDo(t, w.roll()) // the roll Append makes before a batch that does not fit
	mustDo(t, w.Close())
	names, err := m.List("/wal")
	mustDo(t, err)
	if len(names) != 2 {
		t.Fatalf("segments %q: want the first and the empty one the roll started", names)
	}
	if last := segmentFile(t, m, 2); len(last) > segmentHeaderSize && zeroTailStart(last) > segmentHeaderSize {
		t.Fatalf("segment 2 holds %d bytes of records: want none", zeroTailStart(last)-segmentHeaderSize)
	}

	opened := map[string]int{}
	f := vfs.NewFaultFS(m, 1, func(op vfs.Op) vfs.Fault {
		if op.Kind == vfs.OpOpen {
			opened[filepath.Base(op.Name)]++
		}
		return vfs.NoFault
	})
	w, st, err := Open(f, "/wal", o)
	mustDo(t, err)
	defer w.Close()
	if st.LastIndex() != 5 || st.HardState.Commit != 4 {
		t.Fatalf("recovered last index %d, commit %d: want 5 and 4", st.LastIndex(), st.HardState.Commit)
	}
	for _, name := range names {
		if opened[name] != 1 {
			t.Errorf("Open read %s %d times (reads: %v), want once", name, opened[name], opened)
		}
	}
}
